"""A whole answer (``stream: false``) read as its stream's events would have carried it, for
each API: text, reasoning, tool calls, usage, id and model, checked by hand."""

from __future__ import annotations

import asyncio

import pytest

from loadtest.backends.openai.events import BadResponse
from loadtest.backends.openai.stream import Stream
from loadtest.backends.openai.unstreamed import as_events, read_unstreamed


class Body:
    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    async def read(self, limit: int) -> bytes:
        return self.raw[:limit]


def taken(api: str, raw: bytes) -> Stream:
    stream = Stream(api, 8, keep_reply=True)
    asyncio.run(read_unstreamed(Body(raw), stream, lambda: 123))
    return stream


def test_a_chat_answer_with_reasoning_and_a_tool_call():
    s = taken(
        "chat",
        b'{"id": "chatcmpl-1", "model": "m", "choices": [{"index": 0, "finish_reason": '
        b'"tool_calls", "message": {"role": "assistant", "content": "Sure.", '
        b'"reasoning_content": "think", "tool_calls": [{"id": "c1", "type": "function", '
        b'"function": {"name": "weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}}]}}], '
        b'"usage": {"prompt_tokens": 5, "completion_tokens": 9}}',
    )
    assert (s.response_id, s.model, s.finish_reason) == ("chatcmpl-1", "m", "tool_calls")
    assert s.answer == "Sure." and s.reasoning == [(123, "think")]
    assert s.tool_calls == {0: ["weather", ['{"city": "Oslo"}']]}
    assert s.usage == {"prompt_tokens": 5, "completion_tokens": 9}
    assert s.chunks == [(123, 'Sure.think{"city": "Oslo"}')]


def test_a_completion_reads_as_its_single_chunk():
    s = taken(
        "completions",
        b'{"id": "cmpl-2", "model": "m", "choices": [{"text": " the end", "finish_reason": '
        b'"length"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}',
    )
    assert (s.answer, s.finish_reason, s.usage["completion_tokens"]) == (" the end", "length", 2)


def test_a_responses_answer_with_reasoning_text_and_a_function_call():
    s = taken(
        "responses",
        b'{"id": "resp_3", "model": "m", "status": "completed", "output": ['
        b'{"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", '
        b'"text": "hmm"}]}, {"type": "message", "content": [{"type": "output_text", '
        b'"text": "Hello"}]}, {"type": "function_call", "name": "f", "arguments": "{}"}], '
        b'"usage": {"input_tokens": 4, "output_tokens": 6}}',
    )
    assert (s.response_id, s.model, s.finish_reason) == ("resp_3", "m", "stop")
    assert s.answer == "Hello" and s.reasoning == [(123, "hmm")]
    assert s.tool_calls == {2: ["f", ["{}"]]}
    assert s.usage["prompt_tokens"] == 4 and s.usage["completion_tokens"] == 6


@pytest.mark.parametrize(
    "api, raw, said",
    [
        ("chat", b'{"choices": []}', "choices: expected a list of objects"),
        ("chat", b'{"choices": [{"message": "hi"}]}', "message: expected an object"),
        ("responses", b'{"output": {}}', "output: expected a list"),
        ("chat", b"data: {}\n\n", "not JSON"),  # a stream where an answer was asked for
    ],
)
def test_an_answer_that_is_not_the_apis_is_refused_saying_why(api, raw, said):
    with pytest.raises(BadResponse, match=said):
        taken(api, raw)


def test_an_answer_past_what_its_tokens_could_make_is_refused():
    with pytest.raises(BadResponse, match="the answer is over"):
        taken("completions", b'{"choices": [{"text": "' + b"x" * 200_000 + b'"}]}')


def test_a_completion_is_taken_as_is():
    answer = {"choices": [{"text": "a"}]}
    assert as_events(answer, "completions") == [answer]
