"""``kind: openai``: a served model behind an OpenAI-compatible API, streamed over SSE (aiohttp).

Each request is one streaming POST. Every network read is stamped on arrival (``monotonic_ns``),
and each event's text is counted in tokens: with the model's tokenizer when there is one (a chunk
may carry several tokens), else one token per chunk. When the server streams ``usage``, its
count is the truth: the stamps are reconciled to it (tokens the server generated but did not
stream as text, such as a partial UTF-8 character, arrive with the last chunk at the latest) and
every disagreement is counted and reported. TTFT counts from the intended send time (the runner).

Failures are classified and counted (``http_429``, ``connect_error``, ``server_disconnected``,
...). A server that stops accepting connections, ``fail_after_connect_errors`` in a row with
none succeeding, is down: the run ends with status failed and what it measured. The API key is
read from an environment variable and never written anywhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
from collections import Counter
from pathlib import Path
from typing import Any

from loadtest.backends.base import Backend, BackendInfo
from loadtest.backends.openai.discovery import (
    authorization,
    model_root,
    server_root,
    without_credentials,
)
from loadtest.backends.openai.sse import EventTooLarge, SseParser
from loadtest.core import outside
from loadtest.core.errors import BackendError
from loadtest.core.events import Failed, Finished, Sent, Tokens
from loadtest.workload.tokenizer import ByteTokenizer, ScaledByteTokenizer, render_messages_plainly

PROBE_TOKENS = 2
TOKENIZE_SAMPLE_BYTES = 4096  # text whose server token count sets bytes per token
FIT_TRIES = 8  # rounds to fit a synthetic chat message to its planned length in the template
# A stream may bring this many chunks a token asked for (reasoning, tool calls and empty chunks
# included), plus a few, and this many characters a chunk; past it the server does not stop.
MAX_CHUNKS_PER_TOKEN, MAX_CHUNKS_SLACK, MAX_CHARS_PER_TOKEN = 4, 64, 256
MAX_REPLY_CHARS = 1 << 20  # of a session turn's reply kept for its history (the rest is cut)


class OpenAIBackend(Backend):
    """An OpenAI-compatible server over HTTP (chat or completions), streamed."""

    supports_profiling = True  # the server's own profiler, where it has endpoints for it
    needs_prompt_ids = (
        True  # synthetic prompts are token ids of the model's tokenizer, sent as text
    )

    def __init__(self, spec, clock, context=None) -> None:
        self.spec, self.clock = spec, clock
        self.base_dir = Path((context or {}).get("base_dir", "."))
        # requests go to the URL without its credentials; they travel as a header (start())
        self._base = without_credentials(spec.base_url)
        self.url = self._base.rstrip("/") + (
            "/chat/completions" if spec.api == "chat" else "/completions"
        )
        self._session: Any = None
        self._plan = None
        self._fixed_via: str | None = None
        self._count_tokens = None  # text -> tokens, or None: one token per chunk
        self._connect_errors_in_a_row = 0
        self._last_connect_error = ""
        self.facts: Counter[str] = Counter()
        self.server_model: str | None = None

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> BackendInfo:
        import aiohttp

        # hub lookups, file reads and the tokenizer library's imports off the loop:
        # start_timeout bounds them (a thread it leaves importing torch is harmless: the
        # environment manifest reads only modules whose import has finished)
        tokenizer, tokenizer_source = await asyncio.to_thread(self._load_tokenizer)
        spec = self.spec
        headers = {"Content-Type": "application/json", **spec.headers}
        key = os.environ.get(spec.api_key_env)
        _, auth = authorization(spec.base_url, key)
        if auth:
            headers["Authorization"] = auth
        connector = aiohttp.TCPConnector(
            limit=spec.max_connections, limit_per_host=0, ssl=self._ssl_context(), ttl_dns_cache=300
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=headers,
            timeout=aiohttp.ClientTimeout(
                total=None,
                sock_connect=spec.connect_timeout / 1e9,
                sock_read=spec.read_timeout / 1e9,
            ),
            trace_configs=[self._wire_trace()],
        )
        try:
            self._fixed_via = await self._probe()
        except BackendError:
            await self.stop()
            raise
        sizing = "the model's tokenizer"
        if self._count_tokens:
            tokenizer.prompt_overhead = self._prompt_overhead(tokenizer)
            sizing = (
                f"the model's tokenizer: each prompt is input_tokens as the server counts it, "
                f"{tokenizer.prompt_overhead} of them added by the server "
                + ("(the chat template)" if spec.api == "chat" else "(special tokens)")
            )
        if not self._count_tokens:
            per_token = await self._server_bytes_per_token()
            if per_token is None:
                sizing = "bytes of text: no tokenizer for the model here (one 'token' = one byte)"
            else:
                tokenizer = self._tokenizer = ScaledByteTokenizer(per_token)
                sizing = (
                    f"bytes scaled by the server's /tokenize: {per_token:.3g} bytes of these "
                    "prompts a token (synthetic lengths approximate; input counts are the server's)"
                )
        details = {
            "base_url": spec.base_url,
            "model": spec.model,
            "api": spec.api,
            "server_model": self.server_model,
            "fixed_output_via": self._fixed_via,
            "tokenizer": tokenizer_source,
            "token_counting": "tokenizer (per chunk), reconciled to the server's usage"
            if self._count_tokens
            else "one token per chunk, reconciled to the server's usage",
            "api_key": f"from ${spec.api_key_env}" if key else "none",
            "tls_verify": spec.verify_tls,
            "max_connections": spec.max_connections or "unbounded",
            "prompt_sizing": sizing,
        }
        notices = []
        if not self._count_tokens:
            how = (
                f"prompts are sized with the server's /tokenize ({tokenizer.bytes_per_token:.3g} "
                "bytes a token, approximately)"
                if isinstance(tokenizer, ScaledByteTokenizer)
                else "prompts are sized in bytes of text (a 256-token prompt is 256 bytes)"
            )
            notices.append(
                f"no tokenizer for {spec.model!r} on this machine or the hub: {how}, and output "
                "is counted a token per chunk, reconciled to the server's usage; set "
                "backend.tokenizer to a local folder or a hub id to size prompts in the model's "
                "own tokens"
            )
        return BackendInfo(f"{spec.model} @ {spec.base_url}", tokenizer, details, notices)

    async def prepare(self, plan) -> dict:
        """Keep the plan: dataset rows are sent as their text or chat messages."""
        self._plan = plan  # dataset rows are sent as their text (or chat messages)
        return {}

    async def point_facts(self) -> dict:
        """What the client saw this point: HTTP statuses, pool waits, bad responses, usage checks."""
        facts, self.facts = self.facts, Counter()
        return _report(facts, self.spec.max_connections, self._fixed_via)

    @classmethod
    def combine_facts(cls, spec, details: dict, parts: list[dict]) -> dict:
        """Worker processes' facts as one client's: the counters summed, then described."""
        total: Counter[str] = Counter()
        for part in parts:
            total.update(part.get("http", {}))
        return _report(total, spec.max_connections, details.get("fixed_output_via"))

    async def stop(self) -> dict:
        if self._session is not None:
            await self._session.close()
            self._session = None
        return {}

    # -- one request ------------------------------------------------------------------------

    async def submit(self, req, prompt_ids):
        import aiohttp

        now = self.clock.now_ns
        # warm-up requests are not the run's: what they show is not reported
        facts = self.facts if not req.warmup else Counter()
        body = self._body(req, prompt_ids, facts)
        # (arrival ns, its text): tokens are counted when the stream is done, off the token
        # path; a chunk with no text may still carry a token (a special token, part of a
        # character), given it by _reconcile
        chunks: list[tuple[int, str]] = []
        wire = _Wire()
        chars = 0  # characters of text streamed: bounds what the server's usage may claim
        # a session's turn keeps the reply: the next turn's history holds it
        reply: list[str] | None = [] if req.history is not None else None
        reply_chars = 0  # of the reply: past MAX_REPLY_CHARS the history keeps its start only
        usage = None
        finish_reason = None
        response_id = None  # the server's id: per-request exports join on it
        try:
            async with self._session.post(
                self.url, data=json.dumps(body), trace_request_ctx=wire
            ) as resp:
                self._connect_errors_in_a_row = 0
                if wire.sent_ns:
                    yield wire.sent()
                if resp.status >= 400:
                    facts[f"http_{resp.status}"] += 1
                    yield Failed(now(), f"http_{resp.status}", await _error_text(resp))
                    return
                parser = SseParser()
                done = False
                # what a stream may bring: more chunks or text than the tokens asked for could
                # hold is a server that does not stop (memory would grow with it)
                max_chunks = MAX_CHUNKS_PER_TOKEN * req.output_tokens + MAX_CHUNKS_SLACK
                async for raw in resp.content.iter_any():
                    t = now()
                    try:
                        events = parser.feed(raw)
                    except EventTooLarge as exc:
                        raise BadResponse(str(exc)) from None
                    for data in events:
                        if data == "[DONE]":
                            done = True
                            break
                        event = _event(data)  # BadResponse for anything not an OpenAI chunk
                        if "error" in event:
                            yield Failed(t, "server_error", str(event["error"])[:300])
                            return
                        text, reason, content = self._tokens_in(event)
                        if text is not None:
                            chunks.append((t, text))
                            chars += len(text)
                            if len(chunks) > max_chunks or chars > MAX_CHARS_PER_TOKEN * max_chunks:
                                raise BadResponse(
                                    f"the stream ran past {len(chunks)} chunks, {chars} "
                                    f"characters, for {req.output_tokens} tokens asked"
                                )
                        if reply is not None and content:
                            reply_chars += len(content)
                            if reply_chars <= MAX_REPLY_CHARS:
                                reply.append(content)
                        finish_reason = reason or finish_reason
                        usage = event.get("usage") or usage
                        if response_id is None:
                            response_id = _response_id(event)
                    if done:
                        break
                if not done and finish_reason is None:
                    yield Tokens(tuple(_stamps(self._counted(chunks))))
                    yield Failed(
                        now(),
                        "incomplete_stream",
                        "the stream ended without [DONE] or a finish_reason",
                    )
                    return
        except aiohttp.ClientConnectorError as exc:  # includes TLS verification failures
            kind = (
                "tls_error"
                if isinstance(exc, aiohttp.ClientConnectorCertificateError)
                else "connect_error"
            )
            self._connect_failed(exc)
            yield Failed(now(), kind, str(exc)[:300])
            return
        except aiohttp.ConnectionTimeoutError as exc:
            self._connect_failed(exc)
            yield Failed(now(), "connect_timeout", str(exc)[:300])
            return
        except aiohttp.SocketTimeoutError as exc:  # silent past read_timeout
            yield Tokens(tuple(_stamps(self._counted(chunks))))
            yield Failed(now(), "read_timeout", str(exc)[:300])
            return
        except aiohttp.ServerDisconnectedError as exc:
            yield Tokens(tuple(_stamps(self._counted(chunks))))
            yield Failed(now(), "server_disconnected", str(exc)[:300])
            return
        except (
            aiohttp.ClientPayloadError
        ) as exc:  # a chunked body cut short: the server died mid-stream
            yield Tokens(tuple(_stamps(self._counted(chunks))))
            yield Failed(now(), "stream_cut", str(exc)[:300])
            return
        except aiohttp.ClientOSError as exc:  # reset by the peer, mid-request
            yield Tokens(tuple(_stamps(self._counted(chunks))))
            yield Failed(now(), "connection_reset", str(exc)[:300])
            return
        except aiohttp.ClientError as exc:
            yield Tokens(tuple(_stamps(self._counted(chunks))))
            yield Failed(now(), type(exc).__name__, str(exc)[:300])
            return
        except BadResponse as exc:
            facts["bad_response"] += 1
            yield Tokens(tuple(_stamps(self._counted(chunks))))
            yield Failed(now(), "bad_response", str(exc)[:300])
            return
        finally:
            if wire.queued_ns:
                facts["connection_waits"] += 1
                facts["connection_wait_ns"] += wire.queued_ns
        served = _count(usage, "completion_tokens")
        stamps = (
            [t for t, _ in chunks]  # a chunk a token, as the server says: nothing to count
            if served is not None and served == len(chunks)
            else self._reconcile(self._counted(chunks), usage, chars, facts)
        )
        if reply_chars > MAX_REPLY_CHARS:
            facts["replies_cut"] += 1
        if req.ignore_eos and len(stamps) < req.output_tokens and self._fixed_via != "none":
            facts["short_outputs"] += 1
        prompt_tokens = _count(usage, "prompt_tokens")
        if self._count_tokens and prompt_tokens is not None and prompt_tokens != req.input_tokens:
            facts["prompt_token_mismatch"] += 1
            facts["prompt_tokens_off"] += abs(prompt_tokens - req.input_tokens)
        yield Tokens(tuple(stamps))
        yield Finished(
            stamps[-1] if stamps else now(),
            len(stamps),
            prompt_tokens,
            response_id,
            _count(usage, "completion_tokens"),
            None if reply is None else "".join(reply),
        )

    def _tokens_in(self, obj: dict) -> tuple[str | None, str | None, str | None]:
        """One streamed event's output text, its finish_reason and its content (not reasoning)
        text (``BadResponse`` when the event is not shaped like an OpenAI chunk).

        The text is None for an event that carries no token (usage only; chat's opening chunk,
        which names the role before any text), and empty for a choice with no text: a token
        whose text is empty (a special token, the first bytes of a character) arrives in it."""
        choices = obj.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise BadResponse(f"choices: expected a list of objects, got {str(choices)[:80]}")
        if not choices:
            return None, None, None
        choice = choices[0]
        if self.server_model is None and isinstance(obj.get("model"), str):
            self.server_model = obj["model"]
        if self.spec.api == "chat":
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise BadResponse(f"delta: expected an object, got {str(delta)[:80]}")
            parts = (delta.get("content"), delta.get("reasoning_content") or delta.get("reasoning"))
        else:
            parts = (choice.get("text"), None)
        if not all(p is None or isinstance(p, str) for p in parts):
            raise BadResponse("content: expected text")
        text = "".join(p for p in parts if p)
        reason = choice.get("finish_reason")
        reason = reason if isinstance(reason, str) else None
        if not text:
            opening = self.spec.api == "chat" and "role" in (choice.get("delta") or {})
            return (None if opening else ""), reason, None
        return text, reason, parts[0]

    def _counted(self, chunks: list[tuple[int, str]]) -> list[tuple[int, int]]:
        """Each chunk's tokens by its text: the model's tokenizer where there is one (a chunk
        may hold several), else one a chunk with text; 0 for a chunk with no text."""
        count = self._count_tokens
        if count is None:
            return [(t, 1 if text else 0) for t, text in chunks]
        return [(t, max(1, len(count(text))) if text else 0) for t, text in chunks]

    def _reconcile(
        self, chunks: list[tuple[int, int]], usage: dict | None, chars: int, facts: Counter
    ) -> list[int]:
        """One stamp per token, agreeing with the server's count when it gives one.

        A server that streams a chunk per token (vLLM, TGI) has as many chunks as tokens: each
        chunk is then one token, stamped at its arrival, whatever the client's tokenizer makes
        of its text (a word piece alone may tokenize into two). Otherwise tokens the text does
        not account for go first to the chunks that came with no text, at their own arrival,
        then to the last chunk; an over-count is taken from multi-token chunks, latest first.
        Without ``usage``, a chunk with no text is taken as one token."""
        served = _count(usage, "completion_tokens")
        if served is None:
            return _stamps([(t, n or 1) for t, n in chunks])
        if served == len(chunks):
            return [t for t, _ in chunks]
        counted = sum(n for _, n in chunks)
        if served == counted:
            return _stamps(chunks)
        if not self._plausible(served, counted, chunks, chars):
            facts["usage_implausible"] += 1
            facts["usage_implausible_reported"] += served
            facts["usage_implausible_streamed"] += counted
            return _stamps([(t, n or 1) for t, n in chunks])
        facts["usage_reconciled"] += 1
        counts = [n for _, n in chunks]
        missing = served - counted
        for i, n in enumerate(counts):
            if missing <= 0:
                break
            if n == 0:
                counts[i], missing = 1, missing - 1
        if missing > 0:
            last = [(chunks[-1][0] if chunks else self.clock.now_ns(), missing)]
            return _stamps([(t, n) for (t, _), n in zip(chunks, counts)] + last)
        excess = -missing
        for i in range(len(counts) - 1, -1, -1):
            take = min(excess, counts[i] - 1)
            if take > 0:
                counts[i] -= take
                excess -= take
        return _stamps([(t, n) for (t, _), n in zip(chunks, counts)])

    def _plausible(
        self, served: int, counted: int, chunks: list[tuple[int, int]], chars: int
    ) -> bool:
        """Could the server really have generated ``served`` tokens for what it streamed? Each
        chunk with text holds at least one token; a token is at least one character, but for
        the chunks with no text (special tokens, parts of characters) and a few more; with the
        model's tokenizer the count is close, within a quarter. Past that the server's count
        is not trusted (1000 reported against 8 streamed would multiply tok/s by 125)."""
        empty = sum(1 for _, n in chunks if not n)
        slack = 4 + empty
        if served < len(chunks) - empty:
            return False
        if self._count_tokens is not None:
            return served <= counted + max(slack, counted // 4)
        return served <= chars + slack

    def _connect_failed(self, exc: Exception) -> None:
        self._connect_errors_in_a_row += 1
        self._last_connect_error = str(exc)
        if self._connect_errors_in_a_row >= self.spec.fail_after_connect_errors:
            raise BackendError(
                f"{self.spec.base_url}: the server is down ({self._connect_errors_in_a_row} connection "
                f"attempts in a row failed; last: {self._last_connect_error})"
            )

    def _wire_trace(self):
        """aiohttp tracing hooks: when a request's headers were written to the socket (the
        send, as near the wire as the client shows it) and how long it queued for a pooled
        connection (the client's own wait)."""
        import aiohttp

        now = self.clock.now_ns
        trace = aiohttp.TraceConfig()

        cpu = time.thread_time_ns  # this thread's CPU time: what it ran, not what it waited

        async def started(session, ctx, params) -> None:
            w = ctx.trace_request_ctx
            w.start_ns, w.cpu_start_ns = now(), cpu()

        async def headers_sent(session, ctx, params) -> None:
            w = ctx.trace_request_ctx
            w.sent_ns, w.cpu_sent_ns = now(), cpu()

        async def queued(session, ctx, params) -> None:
            ctx.trace_request_ctx.queue_start_ns = now()

        async def dequeued(session, ctx, params) -> None:
            w = ctx.trace_request_ctx
            w.queued_ns += now() - w.queue_start_ns

        async def connecting(session, ctx, params) -> None:
            ctx.trace_request_ctx.connect_start_ns = now()

        async def connected(session, ctx, params) -> None:
            w = ctx.trace_request_ctx
            w.connect_ns += now() - w.connect_start_ns

        trace.on_request_start.append(started)
        trace.on_request_headers_sent.append(headers_sent)
        trace.on_connection_queued_start.append(queued)
        trace.on_connection_queued_end.append(dequeued)
        trace.on_connection_create_start.append(connecting)
        trace.on_connection_create_end.append(connected)
        return trace

    # -- request bodies -----------------------------------------------------------------------

    def _body(self, req, prompt_ids, facts: Counter) -> dict:
        if req.history is not None:  # a session's turn: the conversation so far
            history = list(req.history)
            text = (
                ""
                if self.spec.api == "chat"
                else self._tokenizer.render_chat(history) or render_messages_plainly(history)
            )
            return self._request(
                text,
                req.history,
                req.output_tokens,
                self._fixed_via if req.ignore_eos else None,
                facts,
            )
        row = (
            self._plan.dataset[req.dataset_row]
            if req.dataset_row is not None and self._plan
            else None
        )
        text = row.text if row else self._tokenizer.decode(prompt_ids)
        if row is None and self.spec.api == "chat" and self._count_tokens:
            text = self._fit_in_template(text, req.input_tokens)
        return self._request(
            text,
            row.messages if row else None,
            req.output_tokens,
            self._fixed_via if req.ignore_eos else None,
            facts,
        )

    def _request(
        self, text: str, messages, n: int, fixed_via: str | None, facts: Counter | None = None
    ) -> dict:
        """A streaming request for ``n`` tokens; ``fixed_via``: how to ask for exactly ``n``."""
        body = {
            "model": self.spec.model,
            "stream": True,
            "max_tokens": n,
            "stream_options": {"include_usage": True},
        }
        if self.spec.api == "chat":
            body["messages"] = list(messages) if messages else [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        if fixed_via is not None:
            self._ask_fixed(body, n, fixed_via, self.facts if facts is None else facts)
        body.update(self.spec.extra_body)
        return body

    def _ask_fixed(self, body: dict, n: int, via: str, facts: Counter) -> None:
        if via == "ignore_eos":
            body.update(ignore_eos=True, min_tokens=n)
        elif via == "generation_config":  # transformers serve: its GenerationConfig, as JSON text
            config: dict[str, Any] = {"max_new_tokens": n, "min_new_tokens": n}
            if getattr(self._tokenizer, "eos_token_id", None) is not None:
                config["eos_token_id"] = self._tokenizer.eos_token_id
            body["generation_config"] = json.dumps(config)
        else:
            facts["fixed_unsupported"] += 1

    async def _probe(self) -> str:
        """Reach the server (a 2-token request) and find how it takes fixed output lengths."""
        modes = (
            [self.spec.fixed_output]
            if self.spec.fixed_output != "auto"
            else ["ignore_eos", "generation_config"]
        )
        last = ""
        for via in modes:
            if via == "none":
                break
            status, text = await self._probe_once(via)
            if status < 400:
                return via
            last = f"HTTP {status}: {text}"
            if status not in (
                400,
                422,
            ):  # not a refused field: the server or the model is the problem
                raise BackendError(f"{self.url}: probe request failed: {last}")
        status, text = await self._probe_once(None)
        if status >= 400:
            raise BackendError(f"{self.url}: probe request failed: HTTP {status}: {text}")
        if self.spec.fixed_output not in ("auto", "none"):
            raise BackendError(
                f"{self.url}: the server refused fixed_output={self.spec.fixed_output}: {last}"
            )
        return "none"

    async def _probe_once(self, via: str | None) -> tuple[int, str]:
        import aiohttp

        body = self._request("hello", None, PROBE_TOKENS, via)
        try:
            async with self._session.post(
                self.url, data=json.dumps(body), trace_request_ctx=_Wire()
            ) as resp:
                if resp.status >= 400:
                    return resp.status, await _error_text(resp)
                raw = await resp.content.read(1 << 20)  # a 2-token answer is a few hundred bytes
                for data in SseParser().feed(raw):
                    if data != "[DONE]":
                        model = _event(data).get("model")
                        if isinstance(model, str):
                            self.server_model = self.server_model or model
                return resp.status, ""
        except BadResponse as exc:
            raise BackendError(
                f"{self.url}: the probe's answer is not an OpenAI stream: {exc}"
            ) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BackendError(
                f"{self.url}: cannot reach the server: {exc or type(exc).__name__}"
            ) from None

    # -- set-up -------------------------------------------------------------------------------

    def _load_tokenizer(self):
        """``backend.tokenizer``; else the served name; else where the server says it loaded
        the model from (``/v1/models``' ``root``: a served name is often not a folder or a hub
        id, ``--served-model-name tiny`` for ``/models/llama``)."""
        name = self.spec.tokenizer or self.spec.model
        tok = self._tokenizer_at(name)
        if isinstance(tok, ByteTokenizer) and not self.spec.tokenizer:
            root = model_root(self.spec.base_url, self.spec.model, self._api_key())
            if root is not None:
                tok = self._tokenizer_at(root)
                name = root if not isinstance(tok, ByteTokenizer) else name
        if isinstance(tok, ByteTokenizer):
            if self.spec.tokenizer:
                raise BackendError(
                    f"backend.tokenizer: no tokenizer found at {self.spec.tokenizer!r} "
                    "(a local directory, or a hub id in the cache or reachable on the hub)"
                )
            self._tokenizer, self._count_tokens = tok, None
            return tok, f"none found for {name!r}: built-in bytes for prompts, one token per chunk"
        self._tokenizer, self._count_tokens = tok, tok.encode
        return tok, getattr(tok, "name", name)

    def _fit_in_template(self, text: str, n: int) -> str:
        """A synthetic chat message whose rendered prompt is ``n`` tokens: inside the template
        its first and last tokens may merge with the template's text (``user: `` + ``hello``),
        so its length is checked there and trimmed or extended by the difference."""
        import random

        tok = self._tokenizer
        for extra in range(FIT_TRIES):
            rendered = tok.render_chat([{"role": "user", "content": text}])
            if rendered is None:
                return text
            off = len(tok.encode(rendered)) - n
            if off == 0:
                return text
            ids = tok.encode(text)
            rng = random.Random(n * FIT_TRIES + extra)
            if off > 0 and len(ids) - off < 1:  # as short as it goes: another token instead
                ids = tok.random_prompt_ids(rng, 1)
            elif off > 0:
                ids = ids[: len(ids) - off]
            else:
                ids = ids + tok.random_prompt_ids(rng, -off)
            text = tok.decode(ids)
        # the nearest found (a planned length under the template's own is out of reach): the
        # server's count is reported beside the plan's
        return text

    def _prompt_overhead(self, tokenizer) -> int:
        """Tokens the server adds to a prompt's text: the special tokens its tokenizer adds
        (completions), or what the chat template wraps a user message in (chat)."""
        import random

        if self.spec.api != "chat":
            return max(0, tokenizer.special_tokens_added())
        sample = tokenizer.decode(tokenizer.random_prompt_ids(random.Random(0), 16))
        rendered = tokenizer.render_chat([{"role": "user", "content": sample}])
        if rendered is None:  # no template here: the server's own, unknown to the client
            return 0
        return max(0, len(tokenizer.encode(rendered)) - len(tokenizer.encode(sample)))

    def _tokenizer_at(self, name: str):
        try:
            from loadtest.backends.hf_tokenizer import load_tokenizer

            return load_tokenizer(name, self.base_dir, trust_remote_code=False, download=True)
        except ImportError:  # no transformers installed: fine for an HTTP client
            return ByteTokenizer()

    def _api_key(self) -> str | None:
        return os.environ.get(self.spec.api_key_env) or None

    # -- the server's profiler -------------------------------------------------------------

    async def profile_start(self, options: dict) -> str | None:
        """The server's own profiler on (vLLM's ``POST /start_profile``, which it serves when
        started with ``--profiler-config``): None when it answered, else why not."""
        return await self._profiler_call("start_profile")

    async def profile_stop(self, out_dir: str) -> dict:
        """The server's profiler off (the profile window bounds the wait: a server writes its
        traces before it answers); where its traces are is the server's business."""
        stopped = await self._profiler_call("stop_profile")
        if stopped is not None:
            return {"profiler": f"the server's: started, but stopping failed ({stopped})"}
        return {
            "profiler": "the server's (POST /start_profile, /stop_profile): its traces are "
            "written on the server's host (vLLM: where --profiler-config's torch_profiler_dir "
            "says)"
        }

    async def _profiler_call(self, name: str) -> str | None:
        """POST ``/<name>`` at the server's root; None on success, else why not (the caller
        bounds how long it may take)."""
        import aiohttp

        try:
            async with self._session.post(
                f"{server_root(self._base)}/{name}",
                timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
                trace_request_ctx=_Wire(),
            ) as resp:
                if resp.status >= 400:
                    hint = " (vLLM serves it when started with --profiler-config)"
                    return f"POST /{name}: HTTP {resp.status}" + (
                        hint if resp.status == 404 else ""
                    )
                await resp.content.read(1 << 16)  # an answer, not a body worth keeping
        except (aiohttp.ClientError, TimeoutError) as exc:
            return f"POST /{name}: {type(exc).__name__}"
        return None

    async def _server_bytes_per_token(self) -> float | None:
        """Bytes a token of the kind of text synthetic prompts are, by the server's own
        ``/tokenize`` (vLLM, SGLang), or None where it has none."""
        import random

        sample = ByteTokenizer().random_prompt_ids(random.Random(0), TOKENIZE_SAMPLE_BYTES)
        text = bytes(sample).decode("ascii")
        try:
            async with self._session.post(
                f"{server_root(self._base)}/tokenize",
                data=json.dumps({"model": self.spec.model, "prompt": text}),
                trace_request_ctx=_Wire(),
            ) as resp:
                if resp.status >= 400:
                    return None
                body = await resp.content.read(1 << 16)  # a count is a few bytes: bounded
            answer = outside.loads(body.decode("utf-8", "replace"))
        except Exception:  # no such endpoint, or not JSON: the server has no /tokenize
            return None
        count = answer.get("count") if isinstance(answer, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            return None
        return len(text) / count

    def _ssl_context(self):
        if not self.spec.verify_tls:
            return False
        if self.spec.ca_bundle:
            path = Path(self.spec.ca_bundle).expanduser()
            return ssl.create_default_context(
                cafile=str(path if path.is_absolute() else self.base_dir / path)
            )
        return True


def _stamps(chunks) -> list[int]:
    out: list[int] = []
    for t, n in chunks:
        out.extend([t] * n)
    return out


class BadResponse(Exception):
    """A streamed event that is not an OpenAI-compatible chunk."""


class _Wire:
    """Per-request stamps from the tracing hooks: when the request started in the client and
    when its bytes left (with the thread's CPU time at both), and its waits on the way: for a
    pooled connection (``queued_ns``) and for a new one (``connect_ns``)."""

    __slots__ = (
        "connect_ns",
        "connect_start_ns",
        "cpu_sent_ns",
        "cpu_start_ns",
        "queue_start_ns",
        "queued_ns",
        "sent_ns",
        "start_ns",
    )

    def __init__(self) -> None:
        self.sent_ns = self.start_ns = self.cpu_start_ns = self.cpu_sent_ns = 0
        self.queue_start_ns = self.queued_ns = 0
        self.connect_start_ns = self.connect_ns = 0

    def sent(self) -> Sent:
        """The send, and where the client's part of its lateness went: the thread was off the
        CPU for whatever of the elapsed time it neither ran nor waited on the network for."""
        elapsed = max(0, self.sent_ns - self.start_ns)
        waited = self.queued_ns + self.connect_ns
        off_cpu = elapsed - (self.cpu_sent_ns - self.cpu_start_ns) - waited
        return Sent(
            self.sent_ns,
            pool_ns=self.queued_ns,
            connect_ns=self.connect_ns,
            off_cpu_ns=max(0, off_cpu),
        )


def _event(data: str) -> dict:
    try:
        event = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadResponse(f"not JSON: {exc}") from None
    if not isinstance(event, dict):
        raise BadResponse(f"expected a JSON object, got {data[:80]}")
    return event


def _response_id(event: dict) -> str | None:
    """The chunk's ``id`` when it is a short printable string (outside text: bounded)."""
    rid = event.get("id")
    if isinstance(rid, str) and 0 < len(rid) <= 128 and rid.isprintable():
        return rid
    return None


def _count(usage, key: str) -> int | None:
    """A token count from a server's ``usage``, if it is a sane integer."""
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


async def _error_text(resp, limit: int = 4096) -> str:
    """The start of an error body (never the whole of a hostile one), as text."""
    try:
        raw = await resp.content.read(limit)
    except Exception:  # the body is only for the message
        return ""
    return raw.decode("utf-8", errors="replace")[:300]


def _report(facts: Counter, max_connections, fixed_via: str | None) -> dict:
    """What the client saw, for the result: the counters and a warning for each problem."""
    out: dict = {"http": dict(facts)}
    warnings = []
    if facts["usage_implausible"]:
        warnings.append(
            f"{facts['usage_implausible']} requests: the server's usage claimed "
            f"{facts['usage_implausible_reported']} output tokens where "
            f"{facts['usage_implausible_streamed']} were streamed; not plausible, so the "
            "streamed count was used"
        )
    if facts["replies_cut"]:
        warnings.append(
            f"{facts['replies_cut']} session replies were longer than {MAX_REPLY_CHARS >> 20} MiB: "
            "the history of their next turns holds the start of each only"
        )
    if facts["bad_response"]:
        warnings.append(
            f"{facts['bad_response']} responses were not OpenAI-shaped streams (bad_response)"
        )
    if facts["connection_waits"]:
        warnings.append(
            f"{facts['connection_waits']} requests waited for a free connection in the "
            f"client's pool (max_connections: {max_connections}), "
            f"{facts['connection_wait_ns'] / 1e6:.1f} ms in all: client lag, counted in "
            "dispatch lag, not in the server's latency"
        )
    if facts["short_outputs"]:
        warnings.append(
            f"{facts['short_outputs']} requests returned fewer tokens than the fixed output length "
            f"(fixed output via {fixed_via}): the server stopped early"
        )
    if facts["fixed_unsupported"]:
        warnings.append(
            f"no fixed-length option (fixed_output: {fixed_via}): {facts['fixed_unsupported']} "
            "requests asked for a fixed length and could stop at EOS"
        )
    if facts["prompt_token_mismatch"]:
        warnings.append(
            f"{facts['prompt_token_mismatch']} requests: the server counted a different prompt "
            f"length than planned, {facts['prompt_tokens_off']} tokens off in all (its tokenizer "
            "or chat template differs from the client's; requests.jsonl has each request's "
            "input_tokens beside planned_input_tokens)"
        )
    if warnings:
        out["warnings"] = warnings
    return out
