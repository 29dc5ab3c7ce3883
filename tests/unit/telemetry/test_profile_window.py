"""Profiler capture windows: the right requests are flagged (and kept out of the statistics), and
the transformers worker's trace holds exactly the window's batches."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from tests.conftest import LENIENT

SIM = {
    "name": "prof",
    "backend": {
        "kind": "sim",
        "max_concurrency": 2,
        "prefill_ms_per_token": 0.1,
        "decode_ms_per_token": 5,
    },
    "workload": {"input_tokens": 100, "output_tokens": 10},
    "load": {"arrival": {"kind": "constant", "rate": 10}, "duration": "10s", "validity": LENIENT},
    "outputs": {"requests_jsonl": True},
    "profile": {"start": "5s", "duration": "2s"},
}


def test_a_time_window_flags_exactly_the_overlapping_requests(run_virtual_fn, tmp_path):
    m = run_virtual_fn(SIM)
    p = m["profile"]
    assert p["window"] == {"start_s": 5.0, "end_s": 7.0}
    assert p["profiler"] == "the simulated server's (records nothing)"
    rows = [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    # 10 req/s from t0; each takes 10 ms + 10 x 5 ms = 60 ms. Request i is sent at i x 100 ms and done
    # at +60 ms: it overlaps [5 s, 7 s] for i = 50 .. 70 (request 49 is done at 4.96 s; 70 is sent at 7.0 s).
    flagged = sorted(r["index"] for r in rows if r["profiled"])
    assert flagged == list(range(50, 71))
    assert p["requests_flagged"] == m["requests"]["profiled"] == 21
    assert m["requests"]["completed"] == 100 and m["latency_ms"]["e2e"]["count"] == 100 - 21


def test_flagged_requests_can_stay_in_the_statistics(run_virtual_fn):
    m = run_virtual_fn(
        {**SIM, "profile": {"start": "5s", "duration": "2s", "exclude_from_stats": False}}
    )
    assert m["requests"]["profiled"] == 21 and m["latency_ms"]["e2e"]["count"] == 100


def test_a_profiler_that_does_not_start_flags_and_excludes_nothing(run_virtual_fn):
    """A server without a profiler (vLLM without --profiler-config answers 404): the window
    says so, and every request counts as if there were no window."""
    m = run_virtual_fn({**SIM, "backend": {**SIM["backend"], "profiler": "absent"}})
    p = m["profile"]
    assert p["profiler"].startswith("none: it did not start (POST /start_profile: HTTP 404")
    assert p["requests_flagged"] == m["requests"]["profiled"] == 0
    assert p["excluded_from_stats"] is False
    assert m["latency_ms"]["e2e"]["count"] == 100
    assert any("the profiler did not start" in w for w in m["validity"]["warnings"])


def test_a_stop_that_never_answers_closes_the_window_at_its_deadline(run_virtual_fn):
    """A stop that hangs (vLLM's stack tracing once did): the window closes at call_timeout
    after the stop was sent, once, and requests after it are measured as usual."""
    m = run_virtual_fn(
        {
            **SIM,
            "backend": {**SIM["backend"], "profiler": "hangs"},
            "profile": {"start": "5s", "duration": "2s", "call_timeout": "1s"},
        }
    )
    p = m["profile"]
    # the stop was sent at 7 s and given up at 8 s: requests 50 .. 80 overlap [5 s, 8 s]
    assert p["window"] == {"start_s": 5.0, "end_s": 8.0}
    assert p["profiler"].startswith(
        "stopping failed: the profiler's stop did not answer within 1 s"
    )
    assert p["requests_flagged"] == 31
    assert m["status"] == "ok" and m["latency_ms"]["e2e"]["count"] == 100 - 31
    assert any("closed then" in w for w in m["validity"]["warnings"])


def test_profile_settings_are_checked(tmp_path):
    from loadtest.config.loading import load_scenario
    from loadtest.core.errors import ScenarioError
    from tests.conftest import write_scenario

    with pytest.raises(ScenarioError, match="start and duration, or requests"):
        load_scenario(
            write_scenario(tmp_path, {**SIM, "profile": {"start": "5s", "requests": [1, 2]}})
        )


@pytest.mark.slow
@pytest.mark.integration
def test_the_worker_trace_holds_only_the_windows_batches(tmp_path, tiny_model_dir):
    from tests.integration.test_transformers_backend import run

    m, rows = run(
        tmp_path / "p",
        tiny_model_dir,
        {"mode": "static", "max_batch_size": 4},
        {"arrival": {"kind": "concurrency", "users": 1}, "requests": 12},
        {"input_tokens": 8, "output_tokens": 4},
        profile={"requests": [4, 7]},
    )
    p = m["profile"]
    assert m["status"] == "ok" and p["trace"] == "trace.json.gz", m["validity"]
    trace = json.loads(gzip.decompress((tmp_path / "p" / "run" / "trace.json.gz").read_bytes()))
    names = {e.get("name", "") for e in trace["traceEvents"]}
    in_trace = set()
    for name in names:
        match = re.fullmatch(r"loadtest batch \[(.*)\]", name)
        if match:
            in_trace |= {int(x) for x in match[1].split(",")}
    flagged = {r["index"] for r in rows if r["profiled"]}
    assert (
        {4, 5, 6, 7} <= in_trace <= flagged
    )  # the window's requests, and nothing it did not touch
    assert not in_trace & {0, 1, 2, 3}
    assert p["top_ops"] and all(
        {"name", "calls", "self_cpu_time_us"} <= set(op) for op in p["top_ops"]
    )
    assert any(op["name"].startswith("aten::") for op in p["top_ops"])
    r = m["roofline"]
    assert r["decode"]["steps"] > 0 and r["decode"]["batch_mean"] == 1.0  # one user: batches of one
    # steps taken while the profiler was on are not the model's speed: left out of the roofline
    assert 8 * (12 - len(flagged)) <= r["prefill"]["tokens"] <= 8 * (12 - 4)


@pytest.mark.integration
def test_operator_tables_match_torchs_key_averages():
    """op_tables reads the raw events (key_averages is ~50x slower); the figures must agree."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from loadtest.backends.transformers.profiling import op_tables

    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(3)])
    prof = profile(activities=[ProfilerActivity.CPU])
    prof.start()
    with torch.profiler.record_function("loadtest batch [1]"):
        for _ in range(50):
            model(torch.randn(2, 16))
    prof.stop()
    ops, kernels = op_tables(prof.profiler.kineto_results.events(), torch.autograd.DeviceType)
    reference = {e.key: e for e in prof.key_averages()}
    assert kernels == [] and "loadtest batch [1]" not in {
        o["name"] for o in ops
    }  # annotations are not operators
    for op in ops:
        ref = reference[op["name"]]
        assert op["calls"] == ref.count
        assert op["self_cpu_time_us"] == pytest.approx(ref.self_cpu_time_total, abs=0.2)
        assert op["cpu_time_us"] == pytest.approx(ref.cpu_time_total, abs=0.2)


class _Event:
    """A raw profiler event as kineto gives it, for the device side the CPU cannot record."""

    def __init__(self, name, device, start_us, dur_us, corr=0, annotation=False):
        self._n, self._d, self._s, self._dur = name, device, start_us * 1000, dur_us * 1000
        self._c, self._a = corr, annotation

    def name(self):
        return self._n

    def device_type(self):
        return self._d

    def is_user_annotation(self):
        return self._a

    def start_ns(self):
        return self._s

    def duration_ns(self):
        return self._dur

    def correlation_id(self):
        return self._c

    def start_thread_id(self):
        return 1


def test_a_requests_range_on_the_gpus_timeline_is_not_a_kernel():
    """On the GPU host each request's record_function range is mirrored on the GPU's timeline
    (a "gpu_user_annotation" spanning all its kernels): counted as a kernel it more than
    doubled the window's kernel time. Two 30 µs matmuls and a 5 µs norm inside a 200 µs range:
    65 µs of kernels, 3 launches, one of them short."""
    from enum import Enum

    from loadtest.backends.transformers.profiling import op_tables

    class Device(Enum):
        CPU = 0
        CUDA = 1

    cpu, gpu = Device.CPU, Device.CUDA
    events = [
        _Event("loadtest batch [3]", cpu, 0, 300, annotation=True),
        _Event("aten::mm", cpu, 10, 20),
        _Event("cudaLaunchKernel", cpu, 12, 5, corr=1),
        _Event("aten::mm", cpu, 40, 20),
        _Event("cudaLaunchKernel", cpu, 42, 5, corr=2),
        _Event("aten::rms_norm", cpu, 70, 20),
        _Event("cudaLaunchKernel", cpu, 72, 5, corr=3),
        _Event("loadtest batch [3]", gpu, 15, 200, annotation=True),
        _Event("nvjet_tst_64x8", gpu, 20, 30, corr=1),
        _Event("nvjet_tst_64x8", gpu, 50, 30, corr=2),
        _Event("triton_red_fused_rsqrt", gpu, 80, 5, corr=3),
    ]
    ops, kernels = op_tables(events, Device)
    assert kernels == [
        {"name": "nvjet_tst_64x8", "cuda_calls": 2, "cuda_time_us": 60.0, "short_calls": 0},
        {"name": "triton_red_fused_rsqrt", "cuda_calls": 1, "cuda_time_us": 5.0, "short_calls": 1},
    ]
    by = {o["name"]: o for o in ops}
    assert "loadtest batch [3]" not in by
    assert by["aten::mm"]["self_cuda_time_us"] == 60.0
    assert by["aten::rms_norm"]["self_cuda_time_us"] == 5.0


def test_a_profiler_that_slows_the_server_near_capacity_is_a_perturbation_not_overload(
    run_virtual_fn,
):
    """An H100 run at 8 req/s was steady without a profile window and "overloaded" with one:
    the engine slowed while the profiler recorded and the backlog never drained. Here the
    simulated server (capacity 100 req/s) stalls for the 4 s its profiler records, at 90 req/s:
    360 requests pile up and drain at 10 a second, past the window's end. The run is steady
    outside the capture, so it is said to be perturbed, with what the capture cost; every
    request sent from the capture on is flagged and kept out of the figures."""
    from tests.conftest import MD1_BACKEND

    m = run_virtual_fn(
        {
            "name": "perturbed",
            "backend": {**MD1_BACKEND, "stalls": [{"at": "10s", "for": "4s"}]},
            "workload": {"input_tokens": 1, "output_tokens": 1},
            "load": {
                "arrival": {"kind": "constant", "rate": 90},
                "duration": "30s",
                "warmup": "0s",
            },
            "profile": {"start": "10s", "duration": "4s"},
        }
    )
    p = m["profile"]
    cost = p["perturbation"]
    assert cost["asked_s"] == 4.0 and cost["lasted_s"] == 4.0
    assert cost["backlog_at_open"] <= 2 and cost["backlog_peak"] >= 350
    assert cost["drained_s"] > 30  # not within the window: only once arrivals stopped
    # flagged: every request sent from 10 s to the end (20 s at 90 a second), give or take one
    assert abs(p["requests_flagged"] - 1800) <= 2
    assert m["latency_ms"]["e2e"]["count"] == m["requests"]["completed"] - p["requests_flagged"]
    stability = m["stability"]
    assert stability["steady"], stability
    assert stability["reasons"][0].startswith("perturbed by the profiler, not overloaded")
    assert not any(w.startswith("overloaded") for w in m["validity"]["warnings"])
    assert any(w.startswith("perturbed by the profiler") for w in m["validity"]["warnings"])


def test_a_profiler_whose_backlog_drains_flags_the_requests_until_then(run_virtual_fn):
    from tests.conftest import MD1_BACKEND

    m = run_virtual_fn(
        {
            "name": "drains",
            "backend": {**MD1_BACKEND, "stalls": [{"at": "10s", "for": "1s"}]},
            "workload": {"input_tokens": 1, "output_tokens": 1},
            "load": {
                "arrival": {"kind": "constant", "rate": 50},
                "duration": "30s",
                "warmup": "0s",
            },
            "profile": {"start": "10s", "duration": "1s"},
        }
    )
    cost = m["profile"]["perturbation"]
    # 50 requests pile up in the 1 s stall and drain at 50 a second: about 1 s after it
    assert 0.8 <= cost["drain_s"] <= 1.2, cost
    assert abs(m["profile"]["requests_flagged"] - 100) <= 10
    assert m["stability"]["steady"]
    # steady all along: the capture's cost is a warning
    assert any(
        w.startswith("the profiler's capture lasted 1 s for 1 s asked and raised the backlog")
        for w in m["validity"]["warnings"]
    ), m["validity"]["warnings"]
