"""Cancellations and model mixes on the virtual clock: the simulated server's times are exact,
so each figure is computed by hand (input 10 tokens at 1 ms each: the first token at 10 ms,
then one every 10 ms; 100 tokens: done at 1000 ms)."""

import json
import random

import pytest

from tests.conftest import run_virtual_scenario

SIM = {
    "kind": "sim",
    "max_concurrency": 1000,
    "prefill_ms_per_token": 1,
    "decode_ms_per_token": 10,
}
N = 400


def scenario(**extra):
    load = {"arrival": {"kind": "constant", "rate": 20}, "requests": N}
    load.update(extra.pop("load", {}))
    return {
        "name": "traffic",
        "backend": SIM,
        "workload": {"input_tokens": 10, "output_tokens": 100, **extra.pop("workload", {})},
        "load": load,
        "outputs": {"requests_jsonl": True},
        **extra,
    }


def records(tmp_path):
    lines = (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_cancelled_after_tokens_are_counted_apart(tmp_path):
    m = run_virtual_scenario(
        tmp_path, scenario(load={"cancel": {"fraction": 0.25, "after_tokens": 5}})
    )
    c, r = m["traffic"]["cancel"], m["requests"]
    planned = c["planned"]
    assert 4 * 25 - 35 < planned < 4 * 25 + 35  # 25% of 400, within 4 standard deviations
    assert c["cancelled"] == r["cancelled"] == planned  # every one cancelled before its end
    assert r["completed"] == N - planned and r["failed"] == 0
    assert c["tokens_received"] == 5 * planned  # one token an event
    assert c["cancelled_at_ms"]["p50"] == pytest.approx(50, rel=0.002)  # 10 ms + 4 x 10 ms
    assert c["ttft_ms"]["p50"] == pytest.approx(10, rel=0.002)
    # the finished requests' figures are untouched: every one ends at 1000 ms
    assert m["latency_ms"]["e2e"]["count"] == N - planned
    assert m["latency_ms"]["e2e"]["p50"] == pytest.approx(1000, rel=0.002)
    statuses = [x["status"] for x in records(tmp_path)]
    assert statuses.count("cancelled") == planned and statuses.count("ok") == N - planned


def test_cancelled_after_a_time_from_the_intended_send(tmp_path):
    m = run_virtual_scenario(
        tmp_path, scenario(load={"cancel": {"fraction": 0.5, "after": "305ms"}})
    )
    c = m["traffic"]["cancel"]
    assert c["cancelled"] == c["planned"] and m["requests"]["failed"] == 0
    assert c["tokens_received"] == 30 * c["cancelled"]  # tokens at 10, 20, ... 300 ms
    assert c["cancelled_at_ms"]["p50"] == pytest.approx(305, rel=0.002)


def test_a_request_done_before_its_cancel_time_is_completed(tmp_path):
    m = run_virtual_scenario(tmp_path, scenario(load={"cancel": {"fraction": 1, "after": "2s"}}))
    assert m["requests"]["completed"] == N and m["traffic"]["cancel"]["cancelled"] == 0


def test_the_cancel_share_is_seeded_and_leaves_the_plan_alone(tmp_path):
    from loadtest.config.scenario import Scenario
    from loadtest.workload.plan import build_plan
    from loadtest.workload.tokenizer import ByteTokenizer

    def plan(cancel):
        data = scenario(load={"cancel": cancel} if cancel else {})
        return build_plan(Scenario.model_validate(data), ByteTokenizer(), str).requests

    plain, a, b = (
        plan(None),
        plan({"fraction": 0.3, "after": "1s"}),
        plan({"fraction": 0.3, "after": "1s"}),
    )
    assert [r.cancel for r in a] == [r.cancel for r in b]  # seeded
    keep = lambda rs: [(r.offset_ns, r.input_tokens, r.prompt_seed) for r in rs]  # noqa: E731
    assert keep(plain) == keep(a)  # a stream of its own: arrivals and prompts unchanged
    # the share is the seeded draws': the same stream gives the same flags
    rng = random.Random("0/cancel")
    assert [r.cancel for r in a] == [rng.random() < 0.3 for _ in a]


def test_a_model_mix_is_broken_down_per_model_and_judged_per_model(tmp_path):
    data = scenario(
        workload={"models": {"big": 3, "small": 1}},
        sla={"ttft_p50": "20ms", "e2e_p50": "900ms"},
    )
    m = run_virtual_scenario(tmp_path, data)
    models = m["traffic"]["models"]
    assert set(models) == {"big", "small"}
    big, small = models["big"], models["small"]
    assert big["planned"] + small["planned"] == N
    assert 300 - 35 < big["planned"] < 300 + 35  # 3 in 4, within 4 standard deviations
    assert (big["completed"], small["completed"]) == (big["planned"], small["planned"])
    assert big["latency_ms"]["e2e"]["p50"] == pytest.approx(1000, rel=0.002)
    assert big["latency_ms"]["ttft"]["count"] == big["completed"]
    # the requests went to their model, as records show
    by_model = [x["model"] for x in records(tmp_path)]
    assert by_model.count("big") == big["planned"]
    checks = {c["name"]: c for c in m["sla"]["checks"]}
    assert checks["ttft_p50 [big]"]["verdict"] == "PASS"
    assert checks["ttft_p50 [small]"]["samples"] == small["completed"]
    assert checks["e2e_p50 [small]"]["verdict"] == "FAIL"  # 1000 ms against 900
    assert m["sla"]["verdict"] == "FAIL"


def test_a_model_mix_needs_a_server_of_several_models(tmp_path):
    from loadtest.config.loading import load_scenario
    from loadtest.core.errors import ScenarioError
    from tests.conftest import write_scenario

    data = scenario(workload={"models": {"a": 1}})
    data["backend"] = {"kind": "noop"}
    with pytest.raises(ScenarioError) as err:
        load_scenario(write_scenario(tmp_path, data), [])
    assert "workload.models" in str(err.value) and "kind: noop" in str(err.value)
