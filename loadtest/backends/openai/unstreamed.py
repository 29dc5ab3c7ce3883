"""An answer that is not streamed (``stream: false``: a gateway or batch client that does not
stream): one JSON document, read whole. Its latency is the whole answer's; its tokens come all
at once with it, so no first token or gap between tokens is claimed. What it holds (the text,
the reasoning, tool calls, usage, the id and model) is taken as its stream's events would have
carried it, by ``stream.Stream``'s own rules: the checks of answers and a session's history read
it as they read a stream."""

from __future__ import annotations

from typing import Any

from loadtest.backends.openai.events import BadResponse, parse_event
from loadtest.backends.openai.stream import MAX_CHARS_PER_TOKEN, MAX_CHUNKS_SLACK, Stream


async def read_unstreamed(resp: Any, stream: Stream, t_ns: Any) -> None:
    """Read the answer to its end and take it into ``stream`` as arrived at ``t_ns()`` (when
    its last byte was read). ``BadResponse`` for an answer that is not the API's, or is larger
    than the tokens asked for could make."""
    limit = MAX_CHARS_PER_TOKEN * 4 * (stream.output_tokens + MAX_CHUNKS_SLACK)
    raw = await resp.read(limit + 1)
    if len(raw) > limit:
        raise BadResponse(f"the answer is over {limit} bytes for {stream.output_tokens} tokens")
    answer = parse_event(raw)
    t = t_ns()
    for event in as_events(answer, stream.api):
        stream._take(t, event)
    if stream.finish_reason is None:
        stream.finish_reason = "stop"  # a whole answer is finished by being whole


def as_events(answer: dict, api: str) -> list[dict]:
    """The events a stream of ``answer`` would have carried (its text in one piece)."""
    if api == "responses":
        return _responses_events(answer)
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BadResponse(f"choices: expected a list of objects, got {str(choices)[:80]}")
    if api == "completions":
        return [answer]  # a completion's choice reads the same streamed or not
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise BadResponse(f"message: expected an object, got {str(message)[:80]}")
    delta = {k: v for k, v in message.items() if k != "tool_calls"}
    calls = message.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise BadResponse(f"tool_calls: expected a list, got {str(calls)[:80]}")
        delta["tool_calls"] = [
            {**call, "index": k} if isinstance(call, dict) else call for k, call in enumerate(calls)
        ]
    chunk = {**answer, "choices": [{**choices[0], "delta": delta}]}
    chunk.pop("message", None)
    return [chunk]


def _responses_events(answer: dict) -> list[dict]:
    output = answer.get("output")
    if not isinstance(output, list):
        raise BadResponse(f"output: expected a list, got {str(output)[:80]}")
    events: list[dict] = [{"type": "response.created", "response": answer}]
    for index, item in enumerate(output):
        if not isinstance(item, dict):
            raise BadResponse(f"output: expected objects, got {str(item)[:80]}")
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    events.append(_delta("response.output_text.delta", part.get("text"), index))
        elif kind == "reasoning":
            for part in (item.get("content") or []) + (item.get("summary") or []):
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    events.append(_delta("response.reasoning_text.delta", part["text"], index))
        elif kind == "function_call":
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": item})  # fmt: skip
            args = item.get("arguments")
            events.append(_delta("response.function_call_arguments.delta", args, index))
    final = "response.incomplete" if answer.get("status") == "incomplete" else "response.completed"
    events.append({"type": final, "response": answer})
    return events


def _delta(kind: str, text: Any, index: int) -> dict:
    if not isinstance(text, str):
        raise BadResponse(f"{kind}: expected text")
    return {"type": kind, "delta": text, "output_index": index}
