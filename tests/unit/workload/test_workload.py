import json
import statistics

import pytest

from loadtest.config.scenario import Scenario
from loadtest.core.errors import ScenarioError
from loadtest.workload.plan import build_plan, read_dataset
from loadtest.workload.tokenizer import ByteTokenizer


def plan_for(data, resolve=lambda n: n):
    return build_plan(Scenario.model_validate({"name": "t", **data}), ByteTokenizer(), resolve)


BASE = {
    "seeds": {"schedule": 0, "prompts": 0, "lengths": 0},
    "workload": {
        "input_tokens": {"dist": "lognormal", "mean": 512, "sigma": 0.4, "min": 16, "max": 4096},
        "output_tokens": {"dist": "uniform", "min": 64, "max": 256},
    },
    "load": {"arrival": {"kind": "poisson", "rate": 20}, "duration": "60s", "warmup": "5s"},
}


def test_same_seeds_give_a_byte_identical_plan():
    assert plan_for(BASE).to_jsonl() == plan_for(BASE).to_jsonl()


def test_each_dimension_has_its_own_seed():
    other = json.loads(json.dumps(BASE))
    other["seeds"]["schedule"] = 1
    a, b = plan_for(BASE).requests, plan_for(other).requests
    assert [r.offset_ns for r in a[:50]] != [r.offset_ns for r in b[:50]]
    # changing the schedule seed leaves lengths and prompts as they were, request for request
    assert [(r.input_tokens, r.output_tokens, r.prompt_seed) for r in a[:50]] == [
        (r.input_tokens, r.output_tokens, r.prompt_seed) for r in b[:50]
    ]


def test_lengths_are_clipped_and_lognormal_mean_holds():
    reqs = plan_for(BASE).requests
    ins = [r.input_tokens for r in reqs]
    assert min(ins) >= 16 and max(ins) <= 4096
    assert statistics.fmean(ins) == pytest.approx(512, rel=0.05)
    assert all(64 <= r.output_tokens <= 256 for r in reqs)


def test_warmup_by_time_and_window():
    plan = plan_for(BASE)
    assert plan.window_start_ns == 5_000_000_000 and plan.window_end_ns == 65_000_000_000
    assert all(r.warmup == (r.offset_ns < 5_000_000_000) for r in plan.requests)
    assert max(r.offset_ns for r in plan.requests) < 65_000_000_000


def test_count_window_and_warmup_requests():
    plan = plan_for(
        {
            "load": {
                "arrival": {"kind": "constant", "rate": 10},
                "requests": 30,
                "warmup_requests": 5,
            }
        }
    )
    assert len(plan.requests) == 35
    assert [r.warmup for r in plan.requests] == [True] * 5 + [False] * 30
    assert plan.window_start_ns == 500_000_000 and plan.window_end_ns is None


def test_synthetic_prompt_has_exactly_the_planned_tokens():
    plan = plan_for(BASE)
    tok = ByteTokenizer()
    for r in plan.requests[:20]:
        ids = plan.prompt_ids(r, tok)
        assert len(ids) == r.input_tokens
        assert len(tok.encode(tok.decode(ids))) == r.input_tokens


def test_dataset_prompts_and_chats(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps({"prompt": "héllo"})
        + "\n\n"
        + json.dumps({"messages": [{"role": "user", "content": "hi"}]})
        + "\n"
    )
    rows = read_dataset(path, ByteTokenizer())
    assert list(rows[0].token_ids) == list("héllo".encode())  # é is two byte tokens
    assert rows[1].text == "user: hi\nassistant:"
    plan = plan_for(
        {"workload": {"dataset": str(path)}, "load": {"arrival": {"kind": "burst"}, "requests": 4}},
        resolve=lambda n: tmp_path / n,
    )
    assert sorted(r.dataset_row for r in plan.requests) == [
        0,
        0,
        1,
        1,
    ]  # each pass is a fresh shuffle
    assert {r.input_tokens for r in plan.requests} == {6, len("user: hi\nassistant:")}


def test_bad_dataset_line_names_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "ok"}\n{"text": "no"}\n')
    with pytest.raises(ScenarioError, match=f"{path}:2:"):
        read_dataset(path, ByteTokenizer())
