"""One request's streamed response, read event by event: the request's state machine.

Every network read is stamped on arrival; its SSE events are parsed and each OpenAI chunk's
text kept beside that stamp (counted in tokens only once the stream is done). A stream ends
with ``[DONE]``, an error event, or the connection; what it may bring is bounded (chunks and
characters by the tokens asked for, a session's reply by ``MAX_REPLY_CHARS``), so a server that
does not stop cannot grow the client's memory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from loadtest.backends.openai.sse import EventTooLarge, SseParser
from loadtest.core.events import Failed

# A stream may bring this many chunks a token asked for (reasoning, tool calls and empty chunks
# included), plus a few, and this many characters a chunk; past it the server does not stop.
MAX_CHUNKS_PER_TOKEN, MAX_CHUNKS_SLACK, MAX_CHARS_PER_TOKEN = 4, 64, 256
MAX_REPLY_CHARS = 1 << 20  # of a session turn's reply kept for its history (the rest is cut)


class BadResponse(Exception):
    """A streamed event that is not an OpenAI-compatible chunk."""


class Stream:
    """What one streamed response brought: each chunk's arrival and text, the characters in
    all, the reply a session keeps, the server's usage, finish reason, response id and model."""

    def __init__(self, api: str, output_tokens: int, keep_reply: bool) -> None:
        self.api = api
        self.chunks: list[tuple[int, str]] = []  # (arrival ns, its text)
        self.chars = 0  # characters of text streamed: bounds what the server's usage may claim
        self.reply: list[str] | None = [] if keep_reply else None
        self.reply_chars = 0  # of the reply: past MAX_REPLY_CHARS the history keeps its start
        self.usage: Any = None
        self.finish_reason: str | None = None
        self.response_id: str | None = None  # the server's id: per-request exports join on it
        self.model: str | None = None
        # more chunks or text than the tokens asked for could hold: a server that does not stop
        self.max_chunks = MAX_CHUNKS_PER_TOKEN * output_tokens + MAX_CHUNKS_SLACK
        self.output_tokens = output_tokens

    async def read(self, content: Any, now: Callable[[], int]) -> Failed | None:
        """Read to the end: None when the stream finished, else the failure it ended in (an
        error event, or no end at all). ``BadResponse`` for anything not an OpenAI stream."""
        parser = SseParser()
        async for raw in content.iter_any():
            t = now()
            try:
                events = parser.feed(raw)
            except EventTooLarge as exc:
                raise BadResponse(str(exc)) from None
            for data in events:
                if data == "[DONE]":
                    return None
                event = parse_event(data)
                if "error" in event:
                    return Failed(t, "server_error", str(event["error"])[:300])
                self._take(t, event)
        if self.finish_reason is None:
            return Failed(
                now(), "incomplete_stream", "the stream ended without [DONE] or a finish_reason"
            )
        return None

    @property
    def reply_cut(self) -> bool:
        """The reply was longer than a session's history keeps."""
        return self.reply_chars > MAX_REPLY_CHARS

    def _take(self, t: int, event: dict) -> None:
        text, reason, content = tokens_in(event, self.api)
        if text is not None:
            self.chunks.append((t, text))
            self.chars += len(text)
            if len(self.chunks) > self.max_chunks or (
                self.chars > MAX_CHARS_PER_TOKEN * self.max_chunks
            ):
                raise BadResponse(
                    f"the stream ran past {len(self.chunks)} chunks, {self.chars} "
                    f"characters, for {self.output_tokens} tokens asked"
                )
        if self.reply is not None and content:
            self.reply_chars += len(content)
            if self.reply_chars <= MAX_REPLY_CHARS:
                self.reply.append(content)
        self.finish_reason = reason or self.finish_reason
        self.usage = event.get("usage") or self.usage
        if self.response_id is None:
            self.response_id = _response_id(event)
        if self.model is None and event.get("choices") and isinstance(event.get("model"), str):
            self.model = event["model"]


def tokens_in(obj: dict, api: str) -> tuple[str | None, str | None, str | None]:
    """One streamed event's output text, its finish_reason and its content (not reasoning)
    text (``BadResponse`` when the event is not shaped like an OpenAI chunk).

    The text is None for an event that carries no token (usage only; chat's opening chunk,
    which names the role before any text), and empty for a choice with no text: a token whose
    text is empty (a special token, the first bytes of a character) arrives in it."""
    choices = obj.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise BadResponse(f"choices: expected a list of objects, got {str(choices)[:80]}")
    if not choices:
        return None, None, None
    choice = choices[0]
    if api == "chat":
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
        opening = api == "chat" and "role" in (choice.get("delta") or {})
        return (None if opening else ""), reason, None
    return text, reason, parts[0]


def parse_event(data: str) -> dict:
    """An SSE event's data as a JSON object (``BadResponse`` otherwise)."""
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
