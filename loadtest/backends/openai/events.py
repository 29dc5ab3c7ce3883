"""What one streamed event of an OpenAI-compatible server carries: its text (the answer's and
the reasoning's), tool-call fragments, a finish reason, usage, an error, the response's id;
for chat, completions and the Responses API. ``stream.Stream`` keeps what a stream's events
carried, in order; this reads one event.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from loadtest.backends.openai.plain import fast_loads as _fast_loads


class BadResponse(Exception):
    """A streamed event that is not an OpenAI-compatible chunk."""


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
            index = _output_index(event)
            return Delta(delta, tools=((index, None, delta),), source=event, has_choice=True)
        if part == "reasoning":
            return Delta(delta, reasoning=delta or None, source=event, has_choice=True)
        return Delta(delta, content=delta or None, source=event, has_choice=True)
    if kind == "response.output_item.added":
        item = event.get("item") or {}
        if isinstance(item, dict) and item.get("type") == "function_call":
            index = _output_index(event)
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


def _output_index(event: dict) -> int:
    """A Responses event's ``output_index``: a whole number (``BadResponse`` otherwise: it keys
    the function call its deltas belong to)."""
    index = event.get("output_index", 0)
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < 1 << 16:
        raise BadResponse(f"{event.get('type')}: output_index: expected a small whole number")
    return index


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


def error_in(event: dict) -> str | None:
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
        except RecursionError:  # no answer of the API nests this deep
            raise BadResponse("JSON nested too deeply to read") from None
    if not isinstance(event, dict):
        raise BadResponse(f"expected a JSON object, got {data[:80]!r}")
    return event


def response_id_in(event: dict) -> str | None:
    """The chunk's ``id`` when it is a short printable string (outside text: bounded)."""
    rid = event.get("id")
    if isinstance(rid, str) and 0 < len(rid) <= 128 and rid.isprintable():
        return rid
    return None
