"""``kind: openai``: a served model behind an OpenAI-compatible API, streamed over SSE (``http1``).

Each request is one streaming POST (``stream.Stream`` reads it). Every network read is stamped
on arrival (``monotonic_ns``); once the stream is done its text is counted in tokens: with the
model's tokenizer when there is one (a chunk may carry several tokens), else one token per
chunk. When the server streams ``usage``, its count is the truth: the stamps are reconciled to
it (``tokens.TokenCounter``) and every disagreement is counted and reported. TTFT counts from
the intended send time (the runner).

Failures are classified and counted (``http_429``, ``connect_error``, ``server_disconnected``,
...). A server that stops accepting connections, ``fail_after_connect_errors`` in a row with
none succeeding, is down: the run ends with status failed and what it measured. The API key is
read from an environment variable and never written anywhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections import Counter
from typing import Any

from loadtest.backends.base import Backend, BackendContext, BackendInfo
from loadtest.backends.openai import connection
from loadtest.backends.openai.bodies import PATHS, RequestBodies
from loadtest.backends.openai.discovery import server_root, without_credentials
from loadtest.backends.openai.events import BadResponse
from loadtest.backends.openai.facts import report
from loadtest.backends.openai.outputs import OutputChecks
from loadtest.backends.openai.pooling import read_answer
from loadtest.backends.openai.probe import Probe
from loadtest.backends.openai.routes import Route, Router
from loadtest.backends.openai.sizing import no_tokenizer_notice, prompt_sizing
from loadtest.backends.openai.stream import Stream
from loadtest.backends.openai.tokens import (
    TokenCounter,
    load_tokenizer,
    usage_count,
)
from loadtest.backends.openai.unstreamed import read_unstreamed
from loadtest.config.apis import POOLING_APIS
from loadtest.config.backend_specs import OpenAISpec
from loadtest.core.clock import Clock
from loadtest.core.errors import BackendError
from loadtest.core.events import Cancelled, Failed, Finished, Tokens
from loadtest.transport.calls import error_text
from loadtest.transport.http1 import HttpFailure
from loadtest.transport.pool import Wire
from loadtest.workload.content import Content
from loadtest.workload.media import MEDIA_SETS_OPEN_ENDED
from loadtest.workload.tokenizer import ByteTokenizer


class OpenAIBackend(Backend[OpenAISpec]):
    """An OpenAI-compatible server over HTTP (chat or completions), streamed."""

    supports_profiling = True  # the server's own profiler, where it has endpoints for it
    needs_prompt_ids = True  # synthetic prompts are token ids of the model's tokenizer, as text
    stops_itself = True  # a stream is read in one go: a cancelled one is stopped here

    def __init__(
        self, spec: OpenAISpec, clock: Clock, context: BackendContext | None = None
    ) -> None:
        super().__init__(spec, clock, context)
        self.base_dir = self.context.base_dir
        # requests go to the URL without its credentials; they travel as a header (start())
        self._base = without_credentials(spec.base_url)
        self.url = self._base.rstrip("/") + PATHS[spec.api]
        self._pooled = spec.api in POOLING_APIS
        self._pool: Any = None  # connection.ConnectionPool, once started (the first endpoint's)
        self._router: Router | None = None  # every endpoint's, once started
        self._tokens = TokenCounter(None, clock.now_ns)
        self._bodies = RequestBodies(spec, ByteTokenizer(), fit=False)
        self.facts: Counter[str] = Counter()
        self.server_model: str | None = None
        self._checks = OutputChecks(Content())
        self._described: dict = {}  # what the run's requests carry and are checked for

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> BackendInfo:
        # hub lookups, file reads and the tokenizer library's imports off the loop:
        # start_timeout bounds them (a thread it leaves importing torch is harmless: the
        # environment manifest reads only modules whose import has finished)
        spec = self.spec
        key = self._api_key()
        try:
            self.settings = connection.client_settings(spec, self.base_dir)
            routes: list[Route] = []
            for given in spec.base_urls():
                base = without_credentials(given)
                url = base.rstrip("/") + PATHS[spec.api]
                settings = connection.client_settings(spec, self.base_dir, given)
                pool = connection.open_pool(spec, url, settings, self.clock.now_ns)
                # one URL twice (its logins differ, say): each its own row, by its place
                label = base
                if any(r.base == base for r in routes):
                    label = f"{base} (endpoint {len(routes) + 1})"
                routes.append(Route(base, url, pool, label))
        except ValueError as exc:
            raise BackendError(f"backend: {exc}") from None
        self._router = Router(routes, spec.routing)
        self._pool = routes[0].pool
        tokenizer, tokenizer_source, count = await asyncio.to_thread(
            load_tokenizer, spec.tokenizer, spec.model, spec.base_url, key, self.base_dir,
            self.settings,
        )  # fmt: skip
        self._tokens.count = count
        self._bodies = RequestBodies(spec, tokenizer, fit=count is not None)
        probe = Probe(spec, self._bodies, self._tokens, self.clock, self._pooled)
        try:
            self._bodies.fixed_via = await probe.fixed_output(routes[0])
            await probe.the_others(routes, self._bodies.fixed_via)
        except BackendError:
            await self.stop()
            raise
        self.server_model = probe.server_model
        tokenizer, sizing = await prompt_sizing(
            spec, tokenizer, bool(count), self._pool, self._base
        )
        self._bodies.tokenizer = tokenizer
        details = {
            "base_url": spec.base_url,
            "model": spec.model,
            "api": spec.api,
            "server_model": self.server_model,
            "fixed_output_via": self._bodies.fixed_via,
            "tokenizer": tokenizer_source,
            "token_counting": "tokenizer (per chunk), reconciled to the server's usage"
            if count
            else "one token per chunk, reconciled to the server's usage",
            "api_key": f"from ${spec.api_key_env}" if key else "none",
            "tls_verify": spec.verify_tls,
            "client_certificate": spec.client_cert is not None,
            # its buffering is inside every stamp: a proxy between the client and the server
            "proxy": self._pool.proxy.origin if self._pool.proxy else "none",
            "max_connections": spec.max_connections or "unbounded",
            "prompt_sizing": sizing,
            "streamed": spec.stream and not self._pooled,
        }
        notices = [] if count else [no_tokenizer_notice(spec.model, tokenizer)]
        return BackendInfo(f"{spec.model} @ {spec.base_url}", tokenizer, details, notices)

    async def prepare(self, plan) -> dict:
        """Keep the plan (dataset rows are sent as their text or chat messages, with its tools
        and answer format), and render its media before t0."""
        self._bodies.plan = plan
        await self._check_models(plan)
        self._checks = OutputChecks(plan.content)
        self._described = self._checks.describe()
        if plan.media is not None:
            # a closed loop with no request count: as many sets as an open-ended run cycles
            count = plan.planned_count or len(plan.requests) or MEDIA_SETS_OPEN_ENDED
            await asyncio.to_thread(plan.media.render, count)
            self._described["media"] = plan.media.describe()
            self._described["media"]["distinct_sets"] = len(plan.media.sets)
        return {"content": self._described} if self._described else {}

    async def _check_models(self, plan) -> None:
        """A model mix's names are each served (where the server lists its models): a name it
        does not serve would fail every one of its requests, so the run does not start."""
        mix = set(plan.models)
        if not mix:
            return
        listed = await connection.served_models(self._pool, self._base)
        missing = sorted(mix - set(listed or mix))
        if missing:
            raise BackendError(
                f"{self.url}: workload.models names {', '.join(map(repr, missing))}, which the "
                f"server does not serve (it lists {', '.join(map(repr, listed or []))[:300]})"
            )

    async def point_facts(self) -> dict:
        """What the client saw this point: HTTP statuses, pool waits, bad responses, usage checks."""
        facts, self.facts = self.facts, Counter()
        return report(facts, self.spec.max_connections, self._bodies.fixed_via, self._described)

    @classmethod
    def combine_facts(
        cls, spec: OpenAISpec, details: dict[str, Any], parts: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Worker processes' facts as one client's: the counters summed, then described."""
        total: Counter[str] = Counter()
        for part in parts:
            total.update(part.get("http", {}))
        return report(
            total, spec.max_connections, details.get("fixed_output_via"), details.get("content")
        )

    async def stop(self) -> dict:
        if self._router is not None:
            for route in self._router.routes:
                await route.pool.close()
            self._router = None
        self._pool = None
        return {}

    # -- one request ------------------------------------------------------------------------

    async def submit(self, req, prompt_ids):
        now = self.clock.now_ns
        # warm-up requests are not the run's: what they show is not reported
        facts = self.facts if not req.warmup else Counter()
        body = self._bodies.for_request(req, prompt_ids, facts)
        stream = Stream(
            self.spec.api,
            req.output_tokens,
            keep_reply=req.history is not None,
            keep_answer=self._checks.active,
        )
        pooled: tuple[int | None, str | None] | None = None
        wire = Wire()
        failure: Failed | Cancelled | None = None
        partial = True  # a failed stream's tokens so far are kept (not when it never started)
        # a request the plan cancels wakes its reader at every read, so that what it had read
        # at the cancel is taken; the rest in batches (the same stamps, less work)
        cancels = req.stop_at_ns is not None or req.stop_after_tokens is not None
        router = self._router
        assert router is not None
        route = router.pick()
        try:
            resp = await route.pool.request(
                "POST", route.url, json.dumps(body, allow_nan=False).encode(), wire, eager=cancels
            )
            try:
                route.connect_errors = 0
                yield wire.sent(route.label if router.several else None)
                if resp.status >= 300:  # an error, or a redirect (not followed)
                    facts[f"http_{resp.status}"] += 1
                    yield Failed(now(), f"http_{resp.status}", await error_text(resp))
                    return
                if self._pooled:
                    pooled = await self._until_stop(
                        req, read_answer(resp, self.spec.api, req.inputs)
                    )
                    if isinstance(pooled, Cancelled):
                        failure, pooled = pooled, None
                elif not self.spec.stream:  # one JSON answer, read whole
                    failure = await self._until_stop(req, read_unstreamed(resp, stream, now))
                    partial = False
                else:
                    failure = await self._until_stop(
                        req, stream.read(resp.batch, now, req.stop_after_tokens, resp.reads)
                    )
                    partial = (
                        not isinstance(failure, Failed) or failure.error_type != "server_error"
                    )
                if isinstance(failure, Cancelled):
                    resp.close()  # the connection goes: the server sees the client leave
            finally:
                resp.release()
        except Exception as exc:
            failed = self._failed(exc, facts, route)
            if failed is None:
                raise
            failure, partial = failed
        finally:
            router.done(route)
            self.server_model = self.server_model or stream.model
            if wire.queued_ns:
                facts["connection_waits"] += 1
                facts["connection_wait_ns"] += wire.queued_ns
        if failure is not None:
            if partial and stream.chunk_ns:
                yield Tokens(tuple(self._tokens.partial(stream.chunks)))
            if isinstance(failure, Failed) and router.several:
                failure = dataclasses.replace(failure, endpoint=route.label)
            yield failure
            return
        if pooled is not None:  # one JSON answer: no tokens, its end is the request's
            prompt_tokens, response_id = pooled
            planned = req.input_tokens * req.inputs  # each input as planned (not rerank's pairs)
            if self._tokens.count and self.spec.api == "embeddings" and prompt_tokens != planned:
                facts["prompt_token_mismatch"] += 1
                facts["prompt_tokens_off"] += abs((prompt_tokens or 0) - planned)
            yield Finished(now(), 0, prompt_tokens, response_id)
            return
        if self._checks.active:
            self._checks.check(stream, facts)
        finished = self._finished if self.spec.stream else self._answered
        for event in finished(req, stream, facts):
            yield event

    async def _until_stop(self, req, reading: Any) -> Any:
        """``reading``'s result, or ``Cancelled`` where the plan cancels the request at a time
        (``req.stop_at_ns``) that comes first: the read is cancelled then, what it read kept."""
        if req.stop_at_ns is None:
            return await reading
        task = asyncio.ensure_future(reading)
        fired: list[int] = []
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None

        def arm() -> None:
            nonlocal timer
            now = self.clock.now_ns()  # the clock may be offset from the loop's: a delay
            if now < req.stop_at_ns:  # early: a loop's timer may fire up to 1 ms before its
                # time (uvloop counts whole ms from the start of its turn), so never trust it
                timer = loop.call_later((req.stop_at_ns - now) / 1e9, arm)
            else:
                fired.append(now)
                task.cancel()

        arm()
        try:
            return await task
        except asyncio.CancelledError:
            if not fired or not task.cancelled():
                raise  # the run's own cancellation (an interrupt, a drain deadline)
            return Cancelled(fired[0])
        finally:
            if timer is not None:
                timer.cancel()

    def _failed(self, exc: Exception, facts: Counter, route: Route) -> tuple[Failed, bool] | None:
        """The failure a request ended in, classified, and whether the tokens it streamed are
        kept (not when it never connected); None for an exception that is not a request's."""
        t = self.clock.now_ns()
        if isinstance(exc, BadResponse):
            facts["bad_response"] += 1
            return Failed(t, "bad_response", str(exc)[:300]), True
        if not isinstance(exc, HttpFailure):
            return None
        if exc.connecting:
            self._connect_failed(exc, route)
        return Failed(t, exc.kind, str(exc)[:300]), not exc.connecting

    def _finished(self, req, stream: Stream, facts: Counter) -> list:
        """A complete stream's tokens, one stamp each, and its end; and what it shows."""
        usage, chunks = stream.usage, stream.chunks
        served = usage_count(usage, "completion_tokens")
        if served is None and stream.closing_empty:
            chunks = chunks[:-1]  # no usage to say otherwise: a closing chunk is not a token
        mode = self._tokens.learn(chunks, usage)
        token_stamps = self._tokens.by_chunk(chunks, mode)
        if token_stamps is None:  # the tokenizer's count, reconciled to the server's
            token_stamps = self._tokens.reconcile(
                self._tokens.counted(chunks),
                usage,
                stream.chars,
                facts,
                req.output_tokens if stream.tool_calls else None,
            )
        if stream.reply_cut and req.history is not None:  # a session's next turn loses it
            facts["replies_cut"] += 1
        fixed_via = self._bodies.fixed_via
        if req.ignore_eos and len(token_stamps) < req.output_tokens and fixed_via != "none":
            facts["short_outputs"] += 1
        prompt_tokens = usage_count(usage, "prompt_tokens")
        if self._tokens.count and prompt_tokens is not None and prompt_tokens != req.input_tokens:
            facts["prompt_token_mismatch"] += 1
            facts["prompt_tokens_off"] += abs(prompt_tokens - req.input_tokens)
        per_chunk = mode is not None  # reasoning chunks have text: a chunk a token either way
        reasoning, first_answer = self._tokens.reasoning(stream, token_stamps, per_chunk, facts)
        return [
            Tokens(tuple(token_stamps)),
            Finished(
                token_stamps[-1] if token_stamps else self.clock.now_ns(),
                len(token_stamps),
                prompt_tokens,
                stream.response_id,
                served,
                None if req.history is None else stream.answer,
                reasoning,
                first_answer,
            ),
        ]

    def _answered(self, req, stream: Stream, facts: Counter) -> list:
        """An unstreamed answer's end: its tokens the server's usage (else its text counted
        with the tokenizer, else a chunk a token), all arrived with it, none stamped."""
        usage = stream.usage
        served = usage_count(usage, "completion_tokens")
        tokens = served
        if tokens is None:
            facts["answers_without_usage"] += 1
            tokens = sum(n for _, n in self._tokens.counted(stream.chunks))
        prompt_tokens = usage_count(usage, "prompt_tokens")
        if self._tokens.count and prompt_tokens is not None and prompt_tokens != req.input_tokens:
            facts["prompt_token_mismatch"] += 1
            facts["prompt_tokens_off"] += abs(prompt_tokens - req.input_tokens)
        if req.ignore_eos and tokens < req.output_tokens and self._bodies.fixed_via != "none":
            facts["short_outputs"] += 1
        details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
        reasoning = usage_count(details, "reasoning_tokens") or 0
        return [
            Finished(
                self.clock.now_ns() if not stream.chunk_ns else stream.chunk_ns[-1],
                tokens,
                prompt_tokens,
                stream.response_id,
                served,
                None if req.history is None else stream.answer,
                min(reasoning, tokens),
                None,
                streamed=False,
            )
        ]

    def _connect_failed(self, exc: Exception, route: Route) -> None:
        """Counted per endpoint: one of several that stops accepting connections is down as a
        lone server is, whatever the others answer."""
        route.connect_errors += 1
        if route.connect_errors >= self.spec.fail_after_connect_errors:
            raise BackendError(
                f"{route.label}: the server is down ({route.connect_errors} "
                f"connection attempts in a row failed; last: {exc})"
            )

    # -- set-up -------------------------------------------------------------------------------

    def _api_key(self) -> str | None:
        return os.environ.get(self.spec.api_key_env) or None

    # -- the server's profiler -------------------------------------------------------------

    async def profile_start(self, options: dict) -> str | None:
        """The server's own profiler on (vLLM's ``POST /start_profile``, which it serves when
        started with ``--profiler-config``): None when it answered, else why not."""
        for route in self._every_route():  # each endpoint's server, where there are several
            failed = await connection.profiler_call(
                route.pool, server_root(route.base), "start_profile"
            )
            if failed is not None:
                return failed if len(self._every_route()) == 1 else f"{route.base}: {failed}"
        return None

    def _every_route(self) -> list[Route]:
        return [] if self._router is None else self._router.routes

    async def profile_stop(self, out_dir: str) -> dict:
        """The server's profiler off (the profile window bounds the wait: a server writes its
        traces before it answers); where its traces are is the server's business."""
        stopped = None
        for route in self._every_route():
            failed = await connection.profiler_call(
                route.pool, server_root(route.base), "stop_profile"
            )
            if failed is not None and stopped is None:
                stopped = failed if len(self._every_route()) == 1 else f"{route.base}: {failed}"
        if stopped is not None:
            return {"profiler": f"the server's: started, but stopping failed ({stopped})"}
        return {
            "profiler": "the server's (POST /start_profile, /stop_profile): its traces are "
            "written on the server's host (vLLM: where --profiler-config's torch_profiler_dir "
            "says)"
        }
