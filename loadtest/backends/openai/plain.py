"""A stream's plain token events, read a run at a time: the events that are each one token's
text and nothing else (most of a stream), their texts, and the shape they share.

A server writes a stream's plain events byte for byte the same but for their text: an event
that is a plain one's bytes with another JSON string where its text was is plain too, with
that string's text. So once one plain event's shape is learned (its bytes before and after its
text's string), a later one is read by parsing that string alone. ``stream.Stream`` takes the
texts; the general rules (``Stream._take``) read everything else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

fast_loads: Callable[[bytes], Any]
try:
    from orjson import loads as fast_loads
except ImportError:  # the standard library's parser: the same answers, slower
    fast_loads = json.loads

# a stream whose plain events keep changing outside their text (a counter, a time) stops
# learning their shape after this many
MAX_SHAPES = 4
# a JSON string after a key (JSON's own whitespace before it)
_STRING = re.compile(rb'[ \t\r\n]*("(?:[^"\\]|\\.)*")', re.DOTALL)


class PlainTokens:
    """The plain token events of one chat or completions stream."""

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.key = b'"content":' if chat else b'"text":'  # where a token's text is
        self.shape: tuple[bytes, bytes] | None = None  # a plain event's bytes around its text
        self.shapes_left = MAX_SHAPES

    def texts(self, datas: list[bytes], start: int) -> list[str]:
        """The texts of the events from ``start`` that are each one token's text and nothing
        else (as ``plain_text`` judges), to the first that is anything else (``[DONE]``, an
        error, a finish reason, usage, reasoning, a tool call, what is no JSON)."""
        texts: list[str] = []
        i, n, chat = start, len(datas), self.chat
        while i < n:
            if self.shape is not None:
                i = self._shaped(datas, i, texts)
                if i == n:
                    break
            data = datas[i]
            try:
                text = plain_text(fast_loads(data), chat)
            except ValueError:
                break
            if text is None:
                break
            texts.append(text)
            i += 1
            if self.shapes_left:
                self._learn(data, text)
        return texts

    def _shaped(self, datas: list[bytes], start: int, texts: list[str]) -> int:
        """The texts of the events from ``start`` that have the learned shape, kept to the
        first that has not (its index returned): it is judged whole."""
        before, after = self.shape or (b"", b"")
        a, z, chat, keep = len(before), len(after), self.chat, texts.append
        for i in range(start, len(datas)):
            data = datas[i]
            if not (data.startswith(before) and data.endswith(after)):
                return i
            try:
                text = fast_loads(data[a : len(data) - z])
            except ValueError:
                return i
            if type(text) is not str or not (text or not chat):
                return i
            keep(text)
        return len(datas)

    def _learn(self, data: bytes, text: str) -> None:
        """Learn ``shape`` from a plain event: its bytes before and after its text's string,
        where the text is the one string of its only key of that name (a quoted name and its
        colon are found only where they are a key); left as it was where it is not so plain."""
        self.shapes_left -= 1
        key = self.key
        found = data.find(key)
        if found < 0 or data.find(key, found + 1) >= 0:
            return
        m = _STRING.match(data, found + len(key))
        if m is None:
            return
        a, b = m.span(1)
        try:
            if fast_loads(data[a:b]) != text:
                return
        except ValueError:
            return
        self.shape = (data[:a], data[b:])


def plain_text(event: Any, chat: bool) -> str | None:
    """The text of a completions (or, ``chat``, a chat) event that carries one token's text
    and nothing else that ``Stream._take`` would keep (no finish reason, usage, error,
    reasoning or tool call), else None: ``Stream._take`` reads it. Once the response's id and
    model are taken, taking such an event as ``Stream._take_text`` does leaves the stream as
    ``Stream._take`` would."""
    if type(event) is not dict or event.get("usage") or "error" in event or "type" in event:
        return None
    choices = event.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None:
        return None
    if not chat:
        text = choice.get("text")
        return text if type(text) is str else None
    delta = choice.get("delta")
    if type(delta) is not dict:
        return None
    text = delta.get("content")
    if (
        type(text) is not str
        or not text  # an empty one may be chat's opening chunk: ``Stream._take`` knows
        or delta.get("reasoning_content")
        or delta.get("reasoning")
        or delta.get("tool_calls")
    ):
        return None
    return text
