"""Trace replay: each format's send times and lengths, Mooncake's shared prefixes, speed, and
errors that name the file, line and field."""

from pathlib import Path

import pytest

from loadtest.config.scenario import Scenario
from loadtest.core.errors import ScenarioError
from loadtest.workload.plan import build_plan
from loadtest.workload.tokenizer import ByteTokenizer
from loadtest.workload.traces import prefix_reuse

DATA = Path(__file__).resolve().parents[3] / "scenarios" / "data"
S = 1_000_000_000


def plan_for(tmp_path, text, fmt, name="trace", **arrival):
    path = tmp_path / name
    path.write_text(text)
    scenario = Scenario.model_validate(
        {
            "name": "t",
            "workload": {"output": "fixed"},
            "load": {"arrival": {"kind": "trace", "file": str(path), "format": fmt, **arrival}},
        }
    )
    return build_plan(scenario, ByteTokenizer(), lambda n: Path(n))


def refusal(tmp_path, text, fmt, **arrival) -> str:
    with pytest.raises(ScenarioError) as err:
        plan_for(tmp_path, text, fmt, **arrival)
    return str(err.value)


MOONCAKE = (
    '{"timestamp": 1000, "input_length": 1300, "output_length": 7, "hash_ids": [1, 2, 3]}\n'
    '{"timestamp": 1500, "input_length": 1100, "output_length": 0, "hash_ids": [1, 2, 4]}\n'
    '{"timestamp": 3000, "input_length": 600, "output_length": 9, "hash_ids": [5, 2]}\n'
)


def test_offsets_are_seconds_or_jsonl_scaled(tmp_path):
    plan = plan_for(tmp_path, '# offsets\n0\n0.5\n{"offset": 1.25}\n', "offsets", time_scale=2)
    assert [r.offset_ns for r in plan.requests] == [0, 1 * S, 2_500_000_000]


def test_offsets_going_backwards_are_refused_with_the_line(tmp_path):
    assert "trace:3: offset: times must not go backwards" in refusal(
        tmp_path, "0\n2\n1\n", "offsets"
    )


def test_mooncake_rows_give_send_times_lengths_and_blocks(tmp_path):
    plan = plan_for(tmp_path, MOONCAKE, "mooncake")
    r = plan.requests
    assert [x.offset_ns for x in r] == [0, S // 2, 2 * S]  # from the first row's timestamp
    assert [(x.input_tokens, x.output_tokens) for x in r] == [(1300, 7), (1100, 1), (600, 9)]
    assert [x.blocks for x in r] == [(1, 2, 3), (1, 2, 4), (5, 2)]
    assert all(x.ignore_eos for x in r)  # output: fixed asks for exactly the trace's length


def test_mooncake_prompts_share_exactly_their_common_leading_blocks(tmp_path):
    plan = plan_for(tmp_path, MOONCAKE, "mooncake")
    tok = ByteTokenizer()
    a, b, c = (plan.prompt_ids(x, tok) for x in plan.requests)
    assert (len(a), len(b), len(c)) == (1300, 1100, 600)
    assert a[:1024] == b[:1024]  # blocks 1 and 2: 2 x 512 tokens
    assert a[1024:1100] != b[1024:1100]  # block 3 against block 4
    assert c[:512] != a[:512] and c[512:600] == a[512:600]  # block 2 after another first block


def test_prefix_reuse_is_what_an_unbounded_cache_would_hit(tmp_path):
    plan = plan_for(tmp_path, MOONCAKE, "mooncake")
    # the second request finds blocks 1 and 2 (1024 of its 1100 tokens); the third's chain
    # starts with block 5, unseen, so nothing: 1024 / (1300 + 1100 + 600)
    assert prefix_reuse(plan.requests, 512) == pytest.approx(1024 / 3000)


def test_prefix_reuse_keys_a_block_by_the_chain_before_it_in_memory_linear_in_blocks():
    import tracemalloc
    from types import SimpleNamespace

    def req(blocks, warmup=False):
        return SimpleNamespace(blocks=tuple(blocks), input_tokens=512 * len(blocks), warmup=warmup)

    # block 2 after block 3 is not block 2 after block 1: only block 3 itself is found again
    assert prefix_reuse([req([1, 2]), req([3, 2]), req([3, 4])], 512) == pytest.approx(
        512 / (3 * 1024)
    )
    # four rows of 20,000 blocks (10 M tokens each): one map entry a block, not one a prefix
    rows = [req(range(k, k + 20_000)) for k in range(4)]
    tracemalloc.start()
    try:
        assert prefix_reuse(rows, 512) == 0.0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak  # keyed by whole prefixes it held ~6 GB


def test_rate_and_time_scale_replay_faster_or_slower(tmp_path):
    # three requests over 2 s; at rate 1 they span 3 s: every time x 1.5
    plan = plan_for(tmp_path, MOONCAKE, "mooncake", rate=1)
    assert [x.offset_ns for x in plan.requests] == [0, 750_000_000, 3 * S]
    plan = plan_for(tmp_path, MOONCAKE, "mooncake", time_scale=0.5)
    assert [x.offset_ns for x in plan.requests] == [0, S // 4, S]


def test_workload_lengths_replace_the_traces_when_asked(tmp_path):
    plan = plan_for(tmp_path, MOONCAKE, "mooncake", lengths="workload")
    assert {(x.input_tokens, x.output_tokens, x.blocks) for x in plan.requests} == {
        (128, 128, None)
    }


def test_burstgpt_and_azure_rows(tmp_path):
    burst = (
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,100,20,120,Conversation log\n"
        "5,GPT-4,30,0,30,API log\n"
        "7.5,ChatGPT,40,12,52,Conversation log\n"
    )
    plan = plan_for(tmp_path, burst, "burstgpt")
    assert [(x.offset_ns, x.input_tokens, x.output_tokens) for x in plan.requests] == [
        (0, 100, 20), (0, 30, 1), (2_500_000_000, 40, 12),
    ]  # fmt: skip
    azure = (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.1805900,396,109\n"
    )
    plan = plan_for(tmp_path, azure, "azure")
    assert [(x.offset_ns, x.input_tokens, x.output_tokens) for x in plan.requests] == [
        (0, 374, 44), (3_500_000_000, 396, 109),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("fmt", "text", "expected"),
    [
        ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n[1]\n', "trace:2: line: not a JSON object"),
        ("mooncake", '{"timestamp": 0, "input_length": 5.5, "output_length": 1}\n', "trace:1: input_length: expected a whole number"),
        ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}\n', "trace:1: hash_ids: expected a list of integers"),
        ("mooncake", '{"input_length": 5, "output_length": 1}\n', "trace:1: timestamp: expected a number"),
        ("burstgpt", "Timestamp,Model,Request tokens\n1,a,2\n", "trace:1: Response tokens: not a column"),
        ("burstgpt", "Timestamp,Model,Request tokens,Response tokens\n\n1,a,2,3\nx,a,2,3\n", "trace:4: Timestamp: expected a number"),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16,1,2\n", "trace:2: TIMESTAMP: expected a date and time"),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "trace:1: TIMESTAMP: the trace holds no requests"),
    ],
)  # fmt: skip
def test_a_bad_row_names_the_file_line_and_field(tmp_path, fmt, text, expected):
    assert expected in refusal(tmp_path, text, fmt)


def test_a_trace_longer_than_the_plan_limit_is_refused_at_the_row(tmp_path):
    path = tmp_path / "t"
    path.write_text("".join(f"{i}\n" for i in range(20)))
    scenario = Scenario.model_validate(
        {
            "name": "t",
            "load": {"arrival": {"kind": "trace", "file": str(path)}, "max_planned_requests": 10},
        }
    )
    with pytest.raises(ScenarioError) as err:
        build_plan(scenario, ByteTokenizer(), Path)
    assert "t:11: the trace holds more than 10 requests" in str(err.value)


def test_a_window_reads_a_trace_only_as_far_as_it_goes(tmp_path):
    path = tmp_path / "t"
    path.write_text("0\n1\n2\n3\nnot a number\n")
    scenario = Scenario.model_validate(
        {"name": "t", "load": {"arrival": {"kind": "trace", "file": str(path)}, "requests": 3}}
    )
    assert len(build_plan(scenario, ByteTokenizer(), Path).requests) == 3


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("mooncake-sample.jsonl", "mooncake"), ("burstgpt-sample.csv", "burstgpt"), ("azure-sample.csv", "azure")],
)  # fmt: skip
def test_the_shipped_samples_replay(name, fmt):
    scenario = Scenario.model_validate(
        {
            "name": "t",
            "load": {"arrival": {"kind": "trace", "file": str(DATA / name), "format": fmt}},
        }
    )
    plan = build_plan(scenario, ByteTokenizer(), Path)
    assert len(plan.requests) == 120
    assert 45 * S < plan.requests[-1].offset_ns < 75 * S  # about 2 a second for a minute
    if fmt == "mooncake":
        assert 0.5 < prefix_reuse(plan.requests, 512) < 0.8
