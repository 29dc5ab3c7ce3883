"""One request's streamed response, read event by event: the request's state machine.

Every network read is stamped on arrival; its SSE events are parsed and each OpenAI chunk's
text kept beside that stamp (counted in tokens only once the stream is done). A stream ends
with ``[DONE]``, an error event, or the connection; what it may bring is bounded (chunks and
characters by the tokens asked for, a session's reply by ``MAX_REPLY_CHARS``), so a server that
does not stop cannot grow the client's memory.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from loadtest.backends.openai.plain import PlainTokens, plain_text
from loadtest.backends.openai.plain import fast_loads as _fast_loads
from loadtest.backends.openai.sse import EventTooLarge, SseParser
from loadtest.core.events import Cancelled, Failed

# A stream may bring this many chunks a token asked for (reasoning, tool calls and empty chunks
# included), plus a few, and this many characters a chunk; past it the server does not stop.
MAX_CHUNKS_PER_TOKEN, MAX_CHUNKS_SLACK, MAX_CHARS_PER_TOKEN = 4, 64, 256
MAX_REPLY_CHARS = 1 << 20  # of a session turn's reply kept for its history (the rest is cut)
# a batch is taken this many bytes at a time (15-30 events: tens of µs), the loop free between:
# one stream's batch never holds up another's reads for long, whose stamps would wait on it. A
# slice costs a few µs of its own (the coroutine's wake), so slices much smaller cost CPU a token
SLICE_BYTES = 4 << 10


_GOING = object()  # a piece of the body taken, and the stream goes on


class BadResponse(Exception):
    """A streamed event that is not an OpenAI-compatible chunk."""


class Stream:
    """What one streamed response brought: each chunk's arrival and text, the characters in
    all, the reply a session keeps, the server's usage, finish reason, response id and model;
    its reasoning apart, its tool calls' names and arguments, and (``keep_answer``) its answer."""

    def __init__(
        self, api: str, output_tokens: int, keep_reply: bool, keep_answer: bool = False
    ) -> None:
        self.api = api
        # each chunk's arrival ns and its text, in two lists (ints and strings: a token leaves
        # no object behind for the collector to trace while the stream lasts); ``chunks``
        self.chunk_ns: list[int] = []
        self.chunk_texts: list[str] = []
        self.chars = 0  # characters of text streamed: bounds what the server's usage may claim
        self.reply: list[str] | None = [] if keep_reply or keep_answer else None
        self.reply_chars = 0  # of the reply: past MAX_REPLY_CHARS the history keeps its start
        self.usage: Any = None
        self.finish_reason: str | None = None
        self.response_id: str | None = None  # the server's id: per-request exports join on it
        self.model: str | None = None
        self.reasoning: list[tuple[int, str]] = []  # the chunks that were reasoning
        self.first_answer_ns: int | None = None  # the first chunk that was not reasoning
        # tool calls by their index in the answer: [name, argument fragments]
        self.tool_calls: dict[int, list] = {}
        # more chunks or text than the tokens asked for could hold: a server that does not stop
        self.max_chunks = MAX_CHUNKS_PER_TOKEN * output_tokens + MAX_CHUNKS_SLACK
        self.output_tokens = output_tokens
        self._consumed = self._seen = 0  # the body's bytes taken; stamps of reads passed over
        self._plain = PlainTokens(api == "chat") if api in ("chat", "completions") else None

    async def read(
        self,
        batch: Callable[[int], Awaitable[bytes]],
        now: Callable[[], int],
        stop_after: int | None = None,
        reads: tuple[list[int], list[int]] | None = None,
    ) -> Failed | Cancelled | None:
        """Read to the end: None when the stream finished, else the failure it ended in (an
        error event, or no end at all), or ``Cancelled`` once ``stop_after`` chunks of text
        came (a user who read that many tokens and left). ``BadResponse`` for anything not an
        OpenAI stream.

        ``batch(limit)`` gives the body's next bytes (``http1.Response.batch``: many reads'
        worth a wake-up; b"" at its end). Each event is stamped with the time the socket read
        that completed it came in, where ``reads`` has it (each read's ns, and apart the body's
        bytes by then), else when this coroutine got it: on a busy loop that is later, by the
        other streams' work done first."""
        parser = SseParser()
        while raw := await batch(SLICE_BYTES):
            ended = self._take_piece(parser, raw, now, reads, stop_after)
            if ended is not _GOING:
                return ended
        if self.finish_reason is None:
            return Failed(
                now(), "incomplete_stream", "the stream ended without [DONE] or a finish_reason"
            )
        return None

    def _take_piece(
        self,
        parser: SseParser,
        raw: bytes,
        now: Callable[[], int],
        reads: tuple[list[int], list[int]] | None,
        stop_after: int | None,
    ) -> Any:
        """The events ``raw`` completes, taken in order: ``_GOING`` while the stream goes on,
        else how it ended (None: ``[DONE]``)."""
        base = self._consumed
        self._consumed += len(raw)
        try:
            datas, ends = parser.feed(raw)
        except EventTooLarge as exc:
            raise BadResponse(str(exc)) from None
        if not datas:
            return _GOING
        stamps = self._stamps(ends, base, reads, now)
        i, n = 0, len(datas)
        while i < n:
            # a run of tokens and nothing else (most of a stream, once the id and model are
            # known): taken at once
            if stop_after is None and self.model is not None and self.response_id:
                i += self._take_plain_run(datas, stamps, i)
                if i == n:
                    break
            t, data = stamps[i], datas[i]
            i += 1
            if data == b"[DONE]":
                return None
            try:
                event = _fast_loads(data)
            except ValueError:
                event = None
            # a token and nothing else (most events, once the id and model are known): short
            text = self._plain_text(event) if self.model is not None and self.response_id else None
            if text is not None:
                self._take_text(t, text)
            else:
                event = event if type(event) is dict else parse_event(data)
                failed = _error_in(event)
                if failed is not None:
                    return Failed(t, "server_error", failed)
                self._take(t, event)
            if stop_after is not None and len(self.chunk_ns) >= stop_after:
                return Cancelled(t)  # the rest of this read goes unread, as the user left
        return _GOING

    def _stamps(
        self,
        ends: list[int],
        base: int,
        reads: tuple[list[int], list[int]] | None,
        now: Callable[[], int],
    ) -> list[int]:
        """Each event's arrival: the time of the socket read that brought its last byte
        (``base`` + its end, in the body), where ``reads`` has it; else now."""
        if reads is None:
            return [now()] * len(ends)
        times, read_ends = reads
        seen, known, out = self._seen, len(read_ends), []
        first = base + ends[0]
        while seen < known and read_ends[seen] < first:
            seen += 1
        # most often each event came in a read of its own, which ended where the event ends
        n = len(ends)
        if read_ends[seen : seen + n] == [base + end for end in ends]:
            self._seen = seen + n - 1
            return times[seen : seen + n]
        for end in ends:
            at = base + end
            while seen < known and read_ends[seen] < at:
                seen += 1
            out.append(times[seen] if seen < known else now())
        self._seen = seen
        return out

    def _take_plain_run(self, datas: list[bytes], stamps: list[int], start: int) -> int:
        """How many events from ``start`` are each one token's text and nothing else
        (``plain.PlainTokens``), taken as ``_take_text`` takes them one by one, in fewer
        steps; the first that is anything else is left to the general rules."""
        if self._plain is None:
            return 0
        texts = self._plain.texts(datas, start)
        taken = len(texts)
        if not taken:
            return 0
        at = stamps[start : start + taken]
        chars = sum(map(len, texts))
        if (
            len(self.chunk_ns) + taken > self.max_chunks
            or self.chars + chars > MAX_CHARS_PER_TOKEN * self.max_chunks
            or (self.reply is not None and self.reply_chars + chars > MAX_REPLY_CHARS)
            or self.first_answer_ns is None
        ):  # a bound reached, or the answer's start among them: one by one, as ever
            for t, text in zip(at, texts):
                self._take_text(t, text)
            return taken
        self.chunk_ns += at
        self.chunk_texts += texts
        self.chars += chars
        if self.reply is not None:
            self.reply_chars += chars
            self.reply.extend(filter(None, texts))
        return taken

    def _plain_text(self, event: Any) -> str | None:
        """``plain.plain_text``'s judgement of ``event`` for this stream's API (None for the
        Responses API: ``_take`` reads all of its events)."""
        return None if self._plain is None else plain_text(event, self._plain.chat)

    def _take_text(self, t: int, text: str) -> None:
        """A chunk of answer text (``_plain_text``'s), arrived at ``t``."""
        stamps = self.chunk_ns
        stamps.append(t)
        self.chunk_texts.append(text)
        self.chars += len(text)
        if len(stamps) > self.max_chunks or self.chars > MAX_CHARS_PER_TOKEN * self.max_chunks:
            self._ran_past()
        if text:
            if self.first_answer_ns is None:
                self.first_answer_ns = t
            if self.reply is not None:
                self.reply_chars += len(text)
                if self.reply_chars <= MAX_REPLY_CHARS:
                    self.reply.append(text)

    def _ran_past(self) -> None:
        raise BadResponse(
            f"the stream ran past {len(self.chunk_ns)} chunks, {self.chars} "
            f"characters, for {self.output_tokens} tokens asked"
        )

    @property
    def chunks(self) -> list[tuple[int, str]]:
        """Each chunk of text as ``(arrival ns, its text)``, in order."""
        return list(zip(self.chunk_ns, self.chunk_texts))

    @property
    def reply_cut(self) -> bool:
        """The reply was longer than a session's history keeps."""
        return self.reply_chars > MAX_REPLY_CHARS

    @property
    def answer(self) -> str | None:
        """The answer's text (content, not reasoning), where it was kept."""
        return None if self.reply is None else "".join(self.reply)

    def _take(self, t: int, event: dict) -> None:
        d = responses_delta(event) if self.api == "responses" else tokens_in(event, self.api)
        if d.text is not None:
            self.chunk_ns.append(t)
            self.chunk_texts.append(d.text)
            self.chars += len(d.text)
            if len(self.chunk_ns) > self.max_chunks or (
                self.chars > MAX_CHARS_PER_TOKEN * self.max_chunks
            ):
                self._ran_past()
            if d.reasoning:
                self.reasoning.append((t, d.reasoning))
            if self.first_answer_ns is None and (d.content or d.tools):
                self.first_answer_ns = t  # a chunk may end the reasoning and start the answer
        for index, name, args in d.tools:
            call = self.tool_calls.setdefault(index, [None, []])
            call[0] = call[0] or name
            if args:
                call[1].append(args)
        if self.reply is not None and d.content:
            self.reply_chars += len(d.content)
            if self.reply_chars <= MAX_REPLY_CHARS:
                self.reply.append(d.content)
        self.finish_reason = d.reason or self.finish_reason
        self.usage = d.usage or self.usage
        if self.response_id is None:
            self.response_id = _response_id(d.source)
        if self.model is None and d.has_choice and isinstance(d.source.get("model"), str):
            self.model = d.source["model"]


class Delta(NamedTuple):
    """What one streamed event carried: its output text (None: no token; empty: a token with
    no text), the answer's part of it, the reasoning's, tool-call fragments ``(index, name,
    arguments)``, a finish reason and usage, and the object its id and model are read from."""

    text: str | None
    reason: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tools: tuple[tuple[int, str | None, str], ...] = ()
    usage: Any = None
    source: dict = {}
    has_choice: bool = False


def tokens_in(obj: dict, api: str) -> Delta:
    """One chat or completions chunk's output (``BadResponse`` when the event is not shaped
    like an OpenAI chunk).

    The text is None for an event that carries no token (usage only; chat's opening chunk,
    which names the role before any text), and empty for a choice with no text: a token whose
    text is empty (a special token, the first bytes of a character) arrives in it. A tool
    call's argument fragments are output text like any other."""
    choices = obj.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise BadResponse(f"choices: expected a list of objects, got {str(choices)[:80]}")
    usage = obj.get("usage")
    if not choices:
        return Delta(None, usage=usage, source=obj)
    choice = choices[0]
    if api == "completions":  # the most chunks a second: the shortest path
        text = choice.get("text")
        if text is not None and not isinstance(text, str):
            raise BadResponse("content: expected text")
        reason = choice.get("finish_reason")
        reason = reason if isinstance(reason, str) else None
        return Delta(text or "", reason, text or None, None, (), usage, obj, True)
    tools: tuple = ()
    if api == "chat":
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise BadResponse(f"delta: expected an object, got {str(delta)[:80]}")
        content, reasoning = (
            delta.get("content"),
            (delta.get("reasoning_content") or delta.get("reasoning")),
        )
        if delta.get("tool_calls"):
            tools = _tool_fragments(delta["tool_calls"])
    else:
        content, reasoning = choice.get("text"), None
    if not (content is None or isinstance(content, str)) or not (
        reasoning is None or isinstance(reasoning, str)
    ):
        raise BadResponse("content: expected text")
    text = (content or "") + (reasoning or "")
    if tools:
        text += "".join(a for _, _, a in tools)
    reason = choice.get("finish_reason")
    reason = reason if isinstance(reason, str) else None
    if not text and not tools:
        opening = api == "chat" and "role" in (choice.get("delta") or {})
        return Delta(None if opening else "", reason, None, None, (), usage, obj, True)
    return Delta(text, reason, content or None, reasoning or None, tools, usage, obj, True)


def _tool_fragments(calls: Any) -> tuple[tuple[int, str | None, str], ...]:
    """A chat delta's ``tool_calls``: ``(index, name or None, argument fragment)`` each."""
    if not isinstance(calls, list):
        raise BadResponse(f"tool_calls: expected a list, got {str(calls)[:80]}")
    out = []
    for k, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            raise BadResponse(f"tool_calls: expected function objects, got {str(call)[:80]}")
        index = call.get("index", k)
        name, args = fn.get("name"), fn.get("arguments") or ""
        if not isinstance(index, int) or not isinstance(args, str):
            raise BadResponse("tool_calls: index or arguments of the wrong type")
        out.append((index, name if isinstance(name, str) else None, args))
    return tuple(out)


# Responses API events: what each carries (the rest, such as *.done and part events, none)
_RESPONSES_TEXT = {
    "response.output_text.delta": "content",
    "response.reasoning_text.delta": "reasoning",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.function_call_arguments.delta": "tool",
}


def responses_delta(event: dict) -> Delta:
    """One Responses API event's output: text deltas (answer, reasoning, a function call's
    arguments), a function call's start, and the final response's usage and status."""
    kind = event.get("type")
    part = _RESPONSES_TEXT.get(kind) if isinstance(kind, str) else None
    if part is not None:
        delta = event.get("delta")
        if not isinstance(delta, str):
            raise BadResponse(f"{kind}: delta: expected text")
        if part == "tool":
            index = event.get("output_index", 0)
            return Delta(delta, tools=((index, None, delta),), source=event, has_choice=True)
        if part == "reasoning":
            return Delta(delta, reasoning=delta or None, source=event, has_choice=True)
        return Delta(delta, content=delta or None, source=event, has_choice=True)
    if kind == "response.output_item.added":
        item = event.get("item") or {}
        if isinstance(item, dict) and item.get("type") == "function_call":
            index = event.get("output_index", 0)
            name = item.get("name") if isinstance(item.get("name"), str) else None
            return Delta("", tools=((index, name, ""),), source=event, has_choice=True)
        return Delta(None, source=event)
    response = event.get("response")
    if not isinstance(response, dict):
        return Delta(None, source=event)
    if kind in ("response.completed", "response.incomplete"):
        usage = response.get("usage")
        reason = "length" if response.get("status") == "incomplete" else "stop"
        return Delta(None, reason, usage=_chat_usage(usage), source=response, has_choice=True)
    return Delta(None, source=response, has_choice=kind == "response.created")


def _chat_usage(usage: Any) -> Any:
    """The Responses API's usage under chat's names (prompt_tokens, completion_tokens)."""
    if not isinstance(usage, dict):
        return None
    out = dict(usage)
    out.setdefault("prompt_tokens", usage.get("input_tokens"))
    out.setdefault("completion_tokens", usage.get("output_tokens"))
    details = usage.get("output_tokens_details")
    if isinstance(details, dict):
        out.setdefault("completion_tokens_details", details)
    return out


def _error_in(event: dict) -> str | None:
    """A stream's error event (chat's ``{"error": ...}``; the Responses API's ``error`` and
    ``response.failed`` events), as text; None for any other event."""
    kind = event.get("type")
    if kind == "response.failed":
        response = event.get("response")
        error = response.get("error") if isinstance(response, dict) else None
        return str(error or "response.failed")[:300]
    if "error" in event:
        return str(event["error"])[:300]
    if kind == "error":
        return str(event.get("message") or event)[:300]
    return None


def parse_event(data: bytes) -> dict:
    """An SSE event's data (UTF-8 bytes) as a JSON object (``BadResponse`` otherwise). orjson
    parses it where installed (the ``http`` extra; several times faster than the standard
    library); what orjson refuses and the standard library reads (integers past 64 bits, NaN)
    is read the standard library's way, so the two agree on every stream."""
    try:
        event = _fast_loads(data)
    except ValueError:
        try:
            event = json.loads(data.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadResponse(f"not JSON: {exc}") from None
    if not isinstance(event, dict):
        raise BadResponse(f"expected a JSON object, got {data[:80]!r}")
    return event


def _response_id(event: dict) -> str | None:
    """The chunk's ``id`` when it is a short printable string (outside text: bounded)."""
    rid = event.get("id")
    if isinstance(rid, str) and 0 < len(rid) <= 128 and rid.isprintable():
        return rid
    return None
