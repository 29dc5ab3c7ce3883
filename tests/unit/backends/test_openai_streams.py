"""Streams of every API read event by event, on recorded bytes: the Responses API's events,
tool calls' argument fragments, reasoning apart from the answer; and the checks of a finished
stream's tool calls and structured answer, each against a verdict worked out by hand."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from loadtest.backends.openai.outputs import OutputChecks, summary
from loadtest.backends.openai.stream import Stream
from loadtest.workload.content import Content, synthetic_tools
from loadtest.workload.requests import PlannedRequest


class Recorded:
    """A response body's reads, handed over one by one (``batch``, as ``http1.Response``'s
    gives them to a stream opened ``eager``)."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = list(reads)

    async def batch(self, limit: int) -> bytes:
        return self.reads.pop(0) if self.reads else b""


def columns(stamps: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Reads' stamps ``(ns, the body's bytes by then)`` as ``http1.Response.reads`` has them."""
    return [t for t, _ in stamps], [n for _, n in stamps]


def sse(*events: dict, done: bool = True) -> list[bytes]:
    out = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]
    return out + ([b"data: [DONE]\n\n"] if done else [])


def read(api: str, reads: list[bytes], keep_answer: bool = False) -> tuple[Stream, object]:
    clock = iter(range(1000, 10_000, 100))  # each read stamped 100 ns after the one before
    stream = Stream(api, 32, keep_reply=False, keep_answer=keep_answer)
    failure = asyncio.run(stream.read(Recorded(reads).batch, lambda: next(clock)))
    return stream, failure


def chat(delta: dict, reason: str | None = None) -> dict:
    return {
        "id": "c1",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
    }


def test_tool_call_argument_fragments_are_output_text_stamped_on_arrival():
    s, failure = read(
        "chat",
        sse(
            chat({"role": "assistant", "content": ""}),
            chat({"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f"}}]}),
            chat({"tool_calls": [{"index": 0, "function": {"arguments": '{"x": '}}]}),
            chat({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            chat({}, "tool_calls"),
        ),
    )
    assert failure is None
    # the opening chunk carries no token; the name's chunk and the closing one may each be a
    # token with no text (the server's usage decides)
    assert s.chunks == [(1100, ""), (1200, '{"x": '), (1300, "1}"), (1400, "")]
    assert s.tool_calls == {0: ["f", ['{"x": ', "1}"]]}
    assert s.first_answer_ns == 1100 and s.reasoning == []


def test_reasoning_is_kept_apart_and_the_answer_starts_after_it():
    s, _ = read(
        "chat",
        sse(
            chat({"reasoning_content": "let me"}),
            chat({"reasoning": " think"}),  # vLLM's newer name
            chat({"content": "Paris"}),
            chat({}, "stop"),
        ),
        keep_answer=True,
    )
    assert s.reasoning == [(1000, "let me"), (1100, " think")]
    assert s.first_answer_ns == 1200 and s.answer == "Paris"
    assert [t for t, _ in s.chunks] == [1000, 1100, 1200, 1300]


def test_the_responses_api_events_give_text_usage_and_the_end():
    events = [
        {"type": "response.created", "response": {"id": "resp_1", "model": "m"}},
        {"type": "response.reasoning_text.delta", "delta": "hmm", "output_index": 0},
        {"type": "response.output_text.delta", "delta": "Hello", "output_index": 1},
        {"type": "response.output_text.delta", "delta": " world", "output_index": 1},
        {"type": "response.output_text.done", "text": "Hello world"},
        {
            "type": "response.completed",
            "response": {
                "id": "resp_1",
                "status": "completed",
                "usage": {
                    "input_tokens": 5,
                    "output_tokens": 3,
                    "output_tokens_details": {"reasoning_tokens": 1},
                },
            },
        },
    ]
    s, failure = read("responses", sse(*events, done=False), keep_answer=True)
    assert failure is None and s.finish_reason == "stop"
    assert s.chunks == [(1100, "hmm"), (1200, "Hello"), (1300, " world")]
    assert s.answer == "Hello world" and s.first_answer_ns == 1200
    assert (s.usage["prompt_tokens"], s.usage["completion_tokens"]) == (5, 3)
    assert s.usage["completion_tokens_details"] == {"reasoning_tokens": 1}
    assert (s.response_id, s.model) == ("resp_1", "m")


def test_a_responses_function_call_and_an_incomplete_end():
    events = [
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"type": "function_call", "name": "get_weather"}},
        {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": '{"city"'},
        {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": ': "P'},
        {"type": "response.incomplete", "response": {"status": "incomplete", "usage": None}},
    ]  # fmt: skip
    s, failure = read("responses", sse(*events, done=False))
    assert failure is None and s.finish_reason == "length"
    assert s.tool_calls == {0: ["get_weather", ['{"city"', ': "P']]}
    assert [text for _, text in s.chunks] == ["", '{"city"', ': "P']


def test_a_responses_failure_is_a_server_error():
    events = [{"type": "response.failed", "response": {"error": {"message": "boom"}}}]
    _, failure = read("responses", sse(*events, done=False))
    assert failure.error_type == "server_error" and "boom" in failure.message


TOOLS = [
    {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}},
]  # fmt: skip


def finished(tool_calls: dict, answer: str = "", reason: str = "stop") -> Stream:
    s = Stream("chat", 32, keep_reply=False, keep_answer=True)
    s.tool_calls, s.finish_reason = tool_calls, reason
    s.reply = [answer]
    return s


def test_tool_calls_are_judged_against_the_called_tools_schema():
    checks = OutputChecks(Content(tools=TOOLS, tool_choice="required"))
    facts: Counter = Counter()
    checks.check(finished({0: ["f", ['{"x": 1}']], 1: ["f", ['{"x": "a"}']]}), facts)
    checks.check(finished({0: ["f", ['{"x": ']]}), facts)
    checks.check(finished({0: ["g", ["{}"]]}), facts)
    checks.check(finished({}), facts)  # required, and no call
    checks.check(finished({0: ["f", ['{"x"']]}, reason="length"), facts)  # cut: not judged
    out = summary(facts, checks.describe())["tool_calls"]
    assert out == {
        "offered": 1, "choice": "required", "requests": 5, "requests_with_calls": 4,
        "calls": 5, "bad_json": 1, "schema_mismatch": 1, "unknown_tool": 1,
        "cut_at_length": 1, "missing": 1,
    }  # fmt: skip


def test_structured_answers_are_judged_against_the_schema_or_as_a_json_object():
    schema = {"type": "object", "required": ["a"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    checks = OutputChecks(Content(response_format=fmt, answer_schema=schema))
    facts: Counter = Counter()
    for answer in ('{"a": 1}', '{"b": 1}', "[1, 2]", "a: 1"):
        checks.check(finished({}, answer), facts)
    out = summary(facts, checks.describe())["structured"]
    assert (out["checked"], out["bad_json"], out["schema_mismatch"]) == (4, 1, 2)
    objects = OutputChecks(Content(response_format={"type": "json_object"}))
    facts = Counter()
    for answer in ('{"b": 1}', "[1]"):
        objects.check(finished({}, answer), facts)
    assert (facts["structured_ok"], facts["structured_schema_mismatch"]) == (1, 1)


def test_synthetic_tools_are_seeded_and_valid():
    assert synthetic_tools(4, 7) == synthetic_tools(4, 7) != synthetic_tools(4, 8)
    import jsonschema

    for tool in synthetic_tools(8, 1):
        fn = tool["function"]
        jsonschema.Draft202012Validator.check_schema(fn["parameters"])
        assert set(fn["parameters"]["required"]) == set(fn["parameters"]["properties"])


def _backend():
    from types import SimpleNamespace

    from loadtest.backends.openai.client import OpenAIBackend
    from loadtest.config.backend_specs import OpenAISpec

    spec = OpenAISpec(base_url="http://127.0.0.1:9/v1", model="m")
    return OpenAIBackend(spec, SimpleNamespace(now_ns=lambda: 0))


def test_reasoning_is_the_streamed_split_and_a_usage_that_differs_is_counted():
    s, _ = read(
        "chat",
        sse(
            chat({"reasoning": "a"}),
            chat({"reasoning": "b"}),
            chat({"content": "c"}),
            {"choices": [], "usage": {"completion_tokens": 3,
                                      "completion_tokens_details": {"reasoning_tokens": 1}}},
        ),
    )  # fmt: skip
    facts: Counter = Counter()
    # a chunk a token (3 chunks, 3 tokens): 2 streamed as reasoning, whatever usage says
    assert _backend()._tokens.reasoning(s, [1000, 1100, 1200], True, facts) == (2, 1200)
    assert facts["reasoning_usage_mismatch"] == 1


def test_hidden_reasoning_is_usages_count_and_the_answer_starts_with_the_stream():
    s, _ = read(
        "chat",
        sse(
            chat({"content": "x"}),
            {"choices": [], "usage": {"completion_tokens": 9,
                                      "completion_tokens_details": {"reasoning_tokens": 8}}},
        ),
    )  # fmt: skip
    facts: Counter = Counter()
    stamps = [1000] * 9  # reconciled: 8 unstreamed tokens at the chunk's arrival, and its own
    assert _backend()._tokens.reasoning(s, stamps, False, facts) == (8, 1000) and not facts
    plain, _ = read("chat", sse(chat({"content": "x"}), chat({"content": "y"})))
    assert _backend()._tokens.reasoning(plain, [1000, 1100], True, Counter()) == (0, 1000)


def test_a_stream_stopped_after_n_tokens_leaves_the_rest_of_the_read_unread():
    """Five events in one read, a user who leaves after the third: three tokens, stamped with
    the read's time, and ``Cancelled`` at that time; the other two never counted."""
    from loadtest.core.events import Cancelled

    chunk = {"id": "c", "model": "m", "choices": [{"index": 0, "text": "w "}]}
    reads = [b"".join(sse(*[chunk] * 5, done=False))]
    stream = Stream("completions", 32, keep_reply=False)
    failure = asyncio.run(stream.read(Recorded(reads).batch, lambda: 777, stop_after=3))
    assert failure == Cancelled(777)
    assert stream.chunks == [(777, "w ")] * 3


# -- the fast paths give what the general ones give -------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from loadtest.backends.openai.sse import SseParser  # noqa: E402

_DATA = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12).map(
    lambda s: json.dumps({"choices": [{"index": 0, "text": s}]})
)
_EVENT = st.one_of(
    _DATA.map(lambda d: f"data: {d}\n\n"),  # the common shape
    _DATA.map(lambda d: f"data:{d}\n\n"),  # no space after the colon
    _DATA.map(lambda d: f"data: {d}\r\n\r\n"),
    _DATA.map(lambda d: f": keep-alive\n\ndata: {d}\n\n"),
    _DATA.map(lambda d: f"event: e\nid: 7\ndata: {d}\n\n"),
    st.just("data: [DONE]\n\n"),
    st.just("\n"),  # a stray blank line
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_EVENT, max_size=12), st.lists(st.integers(0, 400), max_size=8), st.data())
def test_the_fast_sse_path_reads_what_the_spec_rules_read(events, cuts, data):
    """Any stream, cut into reads anywhere: the same events, read by read, whether each read
    took the one-pass path or the general rules alone."""
    raw = "".join(events).encode()
    points = sorted({min(c, len(raw)) for c in cuts})
    reads = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)]) if b > a]
    fast, general = SseParser(), SseParser()
    for r in reads:
        assert fast.feed(r) == general.feed_general(r)
    assert fast.pending == general.pending


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
_CHAT_DELTA = st.one_of(
    _TEXT.map(lambda t: {"content": t}),  # the common shape
    st.just({"role": "assistant", "content": ""}),  # chat's opening chunk
    _TEXT.map(lambda t: {"role": "assistant", "content": t}),
    st.tuples(_TEXT, _TEXT).map(lambda p: {"content": p[0], "reasoning_content": p[1]}),
    _TEXT.map(lambda t: {"reasoning": t, "content": None}),
    st.tuples(_TEXT, _TEXT).map(lambda p: {"content": p[0], "reasoning": p[1]}),
    _TEXT.map(lambda t: {"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": t}}]}),
    st.just({}),
)
_COMPLETION_CHOICE = st.one_of(_TEXT.map(lambda t: {"text": t}), st.just({}))


@st.composite
def _chunk(draw, api: str) -> dict:
    """One streamed event of ``api``, of any of the shapes servers send."""
    if draw(st.integers(0, 40)) == 0:
        return {"error": {"message": "overloaded"}}
    event: dict = {}
    if draw(st.booleans()):
        event["id"] = "c1"
    if draw(st.booleans()):
        event["model"] = "m"
    choices = []
    if draw(st.integers(0, 5)):
        choice = dict(draw(_CHAT_DELTA if api == "chat" else _COMPLETION_CHOICE))
        choice = {"delta": choice} if api == "chat" else choice
        choice["index"] = 0
        choice["finish_reason"] = draw(st.sampled_from([None, None, None, "stop", "length"]))
        choices.append(choice)
    event["choices"] = choices
    usage = draw(st.sampled_from([None, None, {}, {"prompt_tokens": 3, "completion_tokens": 4}]))
    if usage is not None or draw(st.booleans()):
        event["usage"] = usage
    return event


def _token(api: str) -> st.SearchStrategy[dict]:
    """A plain token's event (most of a stream): its id, model and text, at times with a
    field that changes from event to event, or the text's key once more elsewhere. A chat
    event's text may be empty, as its opening chunk's is: the general rules must read that."""
    choice = (
        _TEXT.map(lambda t: {"index": 0, "delta": {"content": t}})
        if api == "chat"
        else _TEXT.map(lambda t: {"index": 0, "text": t})
    )
    key = "content" if api == "chat" else "text"
    extra = st.one_of(
        st.sampled_from([{}, {}, {}, {"created": 1}, {"created": 2}]),
        _TEXT.map(lambda t: {"meta": {key: t}}),
    )
    return st.tuples(choice, extra).map(
        lambda ce: {"id": "c1", "model": "m", **ce[1], "choices": [ce[0]]}
    )


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["completions", "chat"]).flatmap(
        lambda api: st.tuples(
            st.just(api),
            st.lists(st.one_of(_chunk(api), _token(api), _token(api)), min_size=1, max_size=24),
        )
    ),
    st.lists(st.integers(1, 8), max_size=16),
    st.lists(st.integers(1, 4), max_size=8),
    st.integers(1, 20),
    st.integers(1, 6),
    st.integers(0, 40),
    st.sampled_from([(", ", ": "), (",", ":")]),
    st.booleans(),
)
def test_the_fast_paths_leave_a_stream_as_the_general_rules_do(
    recorded, groups, batches, max_chunks, chars_per_chunk, max_reply, separators, ascii_only
):
    """A recorded completions or chat stream of any of the shapes servers send, its events
    grouped into reads as a busy client reads them, each read stamped, with bounds low enough
    to be reached (the chunks and characters a stream may bring, the reply a session keeps): the fast paths
    (one-pass SSE, orjson, a plain token's short path, a run of them taken at once, their text
    read from a learned shape, reads taken in batches) end the stream in the same state as the general rules and the standard library,
    event by event: every token's (stamp, text), the reply, where the answer began, the finish
    reason, usage, id, model, reasoning and tool calls, and how it ended (or what it raised)."""
    import loadtest.backends.openai.events as events_mod
    import loadtest.backends.openai.stream as stream_mod

    api, chunks = recorded
    events = [
        f"data: {json.dumps(c, separators=separators, ensure_ascii=ascii_only)}\n\n".encode()
        for c in chunks
    ] + [b"data: [DONE]\n\n"]
    reads, k = [], 0
    for g in [*groups, len(events)]:
        if k < len(events):
            reads.append(b"".join(events[k : k + g]))
            k += g
    stamps, total = [], 0
    for i, r in enumerate(reads):
        total += len(r)
        stamps.append((1000 * (i + 1), total))

    def state(fast: bool) -> tuple:
        s = Stream(api, 64, keep_reply=True)
        s.max_chunks = max_chunks
        saved = (
            SseParser.feed, stream_mod._fast_loads, stream_mod.tokens_in,
            stream_mod.MAX_REPLY_CHARS, stream_mod.MAX_CHARS_PER_TOKEN, events_mod._fast_loads,
        )  # fmt: skip
        stream_mod.MAX_REPLY_CHARS = max_reply
        stream_mod.MAX_CHARS_PER_TOKEN = chars_per_chunk
        if not fast:
            SseParser.feed = SseParser.feed_general
            stream_mod._fast_loads = events_mod._fast_loads = json.loads
            stream_mod.tokens_in = lambda obj, a: saved[2](
                obj, "general" if a == "completions" else a
            )
            s._plain_text = lambda event: None  # type: ignore[method-assign]
            s._take_plain_run = lambda *a: 0  # type: ignore[method-assign]
        body = Batched(reads, batches) if fast else Recorded(reads)
        try:
            failure = asyncio.run(
                s.read(body.next_batch if fast else body.batch, lambda: 7, reads=columns(stamps))
            )
        except stream_mod.BadResponse as exc:
            failure = f"raised: {exc}"
        finally:
            (
                SseParser.feed, stream_mod._fast_loads, stream_mod.tokens_in,
                stream_mod.MAX_REPLY_CHARS, stream_mod.MAX_CHARS_PER_TOKEN, events_mod._fast_loads,
            ) = saved  # fmt: skip
        return (failure, *whole_state(s))

    assert state(True) == state(False)


def whole_state(s: Stream) -> tuple:
    """Every field of a stream's state (a field added later is compared too, or this fails)."""
    names = sorted(n for n in vars(s) if not n.startswith("_"))
    assert names == [
        "api", "chars", "chunk_ns", "chunk_texts", "closing_empty", "finish_reason",
        "first_answer_ns", "max_chunks", "model", "output_tokens", "reasoning", "reply",
        "reply_chars", "response_id", "tool_calls", "usage",
    ], names  # fmt: skip
    return tuple(getattr(s, n) for n in names)


@pytest.mark.parametrize("fast", [True, False])
def test_an_empty_chunk_with_a_finish_reason_mid_stream_is_a_token_on_every_path(fast):
    """ "a", an empty chunk with a finish reason, then "b", no usage: the empty chunk closes
    nothing (a token came after it), so it is a token, and the count is 3 on either path."""
    from collections import Counter

    from loadtest.backends.openai.endings import streamed_end
    from loadtest.backends.openai.tokens import TokenCounter

    def chunk(text: str, reason=None) -> bytes:
        choice = {"index": 0, "delta": {"content": text}, "finish_reason": reason}
        event = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
        return f"data: {json.dumps(event)}\n\n".encode()

    body = chunk("a") + chunk("", "stop") + chunk("b") + b"data: [DONE]\n\n"
    s = Stream("chat", 8, keep_reply=False)
    if not fast:
        s._plain_text = lambda event: None  # type: ignore[method-assign]
        s._take_plain_run = lambda *a: 0  # type: ignore[method-assign]
    reads = [body[: len(chunk("a"))], body[len(chunk("a")) :]]  # the id and model known first
    assert asyncio.run(s.read(Recorded(reads).batch, lambda: 5)) is None
    assert s.chunk_texts == ["a", "", "b"] and s.closing_empty is False
    req = PlannedRequest(0, 0, 4, 8, 0, None, False, False)
    ends = streamed_end(req, s, Counter(), TokenCounter(None, lambda: 9), None, lambda: 9)
    assert ends[1].output_tokens == 3


def test_a_plain_events_shape_is_learned_once_and_a_shape_that_keeps_changing_is_let_go():
    """vLLM's completions events: the shape is learned from the first plain one (all but its
    text's string) and every later token's text read from it alone; where a field changes
    every event (``created``), a shape is learned four times (``plain.MAX_SHAPES``), then not;
    where the text's key is there twice, none is."""
    import loadtest.backends.openai.plain as plain_mod
    import loadtest.backends.openai.stream as stream_mod

    def event(text: str, created: int = 1) -> dict:
        return {
            "id": "cmpl-1", "object": "text_completion", "created": created, "model": "m",
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": None}],
        }  # fmt: skip

    texts = [" a", ' "q"', " \\", " é", ""]
    s = Stream("completions", 32, keep_reply=True)
    parsed = []
    saved = stream_mod._fast_loads
    stream_mod._fast_loads = plain_mod.fast_loads = lambda b: parsed.append(b) or saved(b)
    try:
        body = b"".join(
            f"data: {json.dumps(event(t), separators=(',', ':'))}\n\n".encode() for t in texts
        )
        failure = asyncio.run(s.read(Recorded([body]).batch, lambda: 5))
    finally:
        stream_mod._fast_loads = plain_mod.fast_loads = saved
    assert failure is not None  # no [DONE]: the stream was cut, its tokens kept
    assert s.chunks == [(5, t) for t in texts] and s.reply == texts[:4]
    before = b'{"id":"cmpl-1","object":"text_completion","created":1,"model":"m",'
    assert s._plain.shape == (
        before + b'"choices":[{"index":0,"text":',
        b',"logprobs":null,"finish_reason":null}]}',
    )
    # the first event parsed whole (it names the id and model), the second whole and its text
    # once more (learned from it), then the rest by their text's string alone
    assert [len(p) > 40 for p in parsed] == [True, True, False, False, False, False]

    s = Stream("completions", 32, keep_reply=False)
    body = b"".join(f"data: {json.dumps(event('x', created=k))}\n\n".encode() for k in range(10))
    asyncio.run(s.read(Recorded([body]).batch, lambda: 5))
    assert s.chunks == [(5, "x")] * 10
    assert s._plain.shapes_left == 0 and s._plain.shape is not None

    # the text's key twice (here the first is another object's, with the same text): no shape
    # is learned, so the other string is never taken for the text
    s = Stream("completions", 32, keep_reply=False)
    body = b"".join(
        f"data: {json.dumps({'meta': {'text': m}, **event(' a')})}\n\n".encode()
        for m in (" a", " a", "zz")
    )
    asyncio.run(s.read(Recorded([body]).batch, lambda: 5))
    assert s.chunks == [(5, " a")] * 3 and s._plain.shape is None

    # an event that begins as the shape does but ends otherwise is read whole: here it is no
    # JSON at all (its text's string and a space, then the shape's end with its last "}"
    # made a "]": what is between the shape's two ends would read as a string), and the
    # stream fails
    s = Stream("completions", 32, keep_reply=False)
    good = json.dumps(event(" a"), separators=(",", ":"))
    at = good.index('"text":') + 7
    bad = good[:at] + '"b" ' + good[at + len('" a"') : -1] + "]"
    body = b"".join(f"data: {e}\n\n".encode() for e in (good, good, bad))
    with pytest.raises(stream_mod.BadResponse, match="not JSON"):
        asyncio.run(s.read(Recorded([body]).batch, lambda: 5))
    assert s.chunks == [(5, " a")] * 2


class Batched(Recorded):
    """The same reads handed over in batches (several reads' bytes at once), as
    ``http1.Response.batch`` gives them once a stream's coroutine wakes."""

    def __init__(self, reads: list[bytes], groups: list[int]) -> None:
        super().__init__(reads)
        self.batches, k = [], 0
        for g in [*groups, len(reads)]:
            if k < len(reads):
                self.batches.append(b"".join(reads[k : k + g]))
                k += g

    async def next_batch(self, limit: int) -> bytes:
        if not self.batches:
            return b""
        taken, self.batches[0] = self.batches[0][:limit], self.batches[0][limit:]
        if not self.batches[0]:
            self.batches.pop(0)
        return taken


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_EVENT, min_size=1, max_size=40),
    st.lists(st.integers(0, 4000), max_size=12),
    st.lists(st.integers(1, 6), max_size=12),
)
def test_a_stream_read_in_batches_keeps_every_stamp_of_the_read_by_read_path(events, cuts, groups):
    """Any stream, cut into socket reads anywhere, each read stamped (ns, the body's bytes by
    then): read piece by piece or in batches of reads (sliced for the loop's sake), every token
    gets the same stamp, that of the read that brought its event's last byte."""
    import loadtest.backends.openai.stream as stream_mod

    raw = "".join(events).encode() + b"data: [DONE]\n\n"
    points = sorted({min(c, len(raw)) for c in cuts})
    reads = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)]) if b > a]
    stamps, total = [], 0
    for i, r in enumerate(reads):
        total += len(r)
        stamps.append((1000 * (i + 1), total))

    def chunks(batched: bool) -> list:
        s = Stream("completions", 64, keep_reply=False)
        body = Batched(reads, groups)

        def late() -> int:
            raise AssertionError("every event has its read's stamp")

        slice_bytes = stream_mod.SLICE_BYTES
        stream_mod.SLICE_BYTES = 40  # a batch taken in slices, cut anywhere
        try:
            failure = asyncio.run(
                s.read(body.next_batch if batched else body.batch, late, reads=columns(stamps))
            )
        finally:
            stream_mod.SLICE_BYTES = slice_bytes
        assert failure is None
        return s.chunks

    by_read = chunks(False)
    assert chunks(True) == by_read
    # by hand: the stamp of the read holding each token's event's end
    expected, offset = [], 0
    for e in events:
        offset += len(e.encode())
        data = [ln[5:].strip() for ln in e.replace("\r\n", "\n").split("\n") if ln[:5] == "data:"]
        if data == ["[DONE]"]:  # the stream's end: what follows is never read
            break
        if data:
            text = json.loads(data[0])["choices"][0]["text"]
            expected.append((next(t for t, n in stamps if n >= offset), text))
    assert by_read == expected
