"""One request's streamed response, read event by event: the request's state machine.

Every network read is stamped on arrival; its SSE events are parsed and each OpenAI chunk's
text kept beside that stamp (counted in tokens only once the stream is done). A stream ends
with ``[DONE]``, an error event, or the connection; what it may bring is bounded (chunks and
characters by the tokens asked for, a session's reply by ``MAX_REPLY_CHARS``), so a server that
does not stop cannot grow the client's memory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from loadtest.backends.openai.events import (
    BadResponse,
    error_in,
    parse_event,
    response_id_in,
    responses_delta,
    tokens_in,
)
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
        # the last chunk of text was empty and carried the finish reason: a closing chunk, which
        # holds no token unless the server's usage says so
        self.closing_empty = False
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
                failed = error_in(event)
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
        seen, known = self._seen, len(read_ends)
        first = base + ends[0]
        while seen < known and read_ends[seen] < first:
            seen += 1
        # most often each event came in a read of its own, which ended where the event ends
        n = len(ends)
        if read_ends[seen : seen + n] == [base + end for end in ends]:
            self._seen = seen + n - 1
            return times[seen : seen + n]
        out = []
        for end in ends:
            at = base + end
            while seen < known and read_ends[seen] < at:
                seen += 1
            out.append(times[seen] if seen < known else now())
        self._seen = seen
        return out

    def _take_plain_run(self, datas: list[bytes], stamps: list[int], start: int) -> int:
        """How many events from ``start`` are each one token's text and nothing else
        (``plain.PlainTokens``), handed to ``_took`` at once; the first that is anything else
        is left to the general rules."""
        if self._plain is None:
            return 0
        texts = self._plain.texts(datas, start)
        if texts:
            self._took(stamps[start : start + len(texts)], texts)
        return len(texts)

    def _plain_text(self, event: Any) -> str | None:
        """``plain.plain_text``'s judgement of ``event`` for this stream's API (None for the
        Responses API: ``_take`` reads all of its events)."""
        return None if self._plain is None else plain_text(event, self._plain.chat)

    def _take_text(self, t: int, text: str) -> None:
        """A chunk of answer text (``_plain_text``'s), arrived at ``t``."""
        self._took([t], [text])

    def _took(
        self,
        at: list[int],
        texts: list[str],
        answers: list[str] | None = None,
        begins: list[bool] | None = None,
        closing: bool = False,
    ) -> None:
        """Chunks of text that arrived at ``at``: the one place the stream's state takes them
        (their stamps and texts, the bounds, where the answer began, the reply, whether the last
        was a closing chunk). The fast paths only decide how many to hand it at once.
        ``answers``: each chunk's answer text, for the reply (None: all of its text);
        ``begins``: whether each may begin the answer (None: any text does); ``closing``: the
        last is an empty chunk with the finish reason."""
        n, chars = len(texts), sum(map(len, texts))
        if n > 1 and (
            len(self.chunk_ns) + n > self.max_chunks
            or self.chars + chars > MAX_CHARS_PER_TOKEN * self.max_chunks
        ):  # a bound passed among them: one at a time, so the stream stops where it passed
            for i in range(n):
                self._took([at[i]], [texts[i]], answers and answers[i : i + 1],
                           begins and begins[i : i + 1], closing and i == n - 1)  # fmt: skip
            return
        self.chunk_ns += at
        self.chunk_texts += texts
        self.chars += chars
        self.closing_empty = closing
        if (
            len(self.chunk_ns) > self.max_chunks
            or self.chars > MAX_CHARS_PER_TOKEN * self.max_chunks
        ):
            self._ran_past()
        if self.first_answer_ns is None:
            flags = begins if begins is not None else map(bool, texts)
            self.first_answer_ns = next((t for t, b in zip(at, flags) if b), None)
        if self.reply is not None:
            parts = texts if answers is None else answers
            total = chars if answers is None else sum(map(len, parts))
            if self.reply_chars + total <= MAX_REPLY_CHARS:
                self.reply_chars += total
                self.reply.extend(filter(None, parts))
            else:  # the history keeps the reply's start
                for part in filter(None, parts):
                    self.reply_chars += len(part)
                    if self.reply_chars <= MAX_REPLY_CHARS:
                        self.reply.append(part)

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
            # a chunk may end the reasoning and start the answer; only its content is the reply
            self._took(
                [t], [d.text], [d.content or ""], [bool(d.content or d.tools)],
                closing=d.reason is not None and not d.text,
            )  # fmt: skip
            if d.reasoning:
                self.reasoning.append((t, d.reasoning))
        for index, name, args in d.tools:
            call = self.tool_calls.setdefault(index, [None, []])
            call[0] = call[0] or name
            if args:
                call[1].append(args)
        self.finish_reason = d.reason or self.finish_reason
        self.usage = d.usage or self.usage
        if self.response_id is None:
            self.response_id = response_id_in(d.source)
        if self.model is None and d.has_choice and isinstance(d.source.get("model"), str):
            self.model = d.source["model"]
