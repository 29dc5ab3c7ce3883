"""GPU sampling with a scripted NVML: missing metrics and errors never fail a run; the summary,
the CSV and the warnings hold what was sampled."""

from __future__ import annotations

import csv
import io
import time

import pytest

from loadtest.telemetry import environment, gpu_sampler
from loadtest.telemetry.gpu_sampler import GpuSampler
from tests.conftest import LENIENT
from tests.fake_nvml import FakeNVML, run_with_nvml

SIM = {
    "name": "gpu",
    "backend": {"kind": "sim", "max_concurrency": 4, "decode_ms_per_token": 2},
    "workload": {"input_tokens": 10, "output_tokens": 10},
    "load": {
        "arrival": {"kind": "poisson", "rate": 50},
        "duration": "1.5s",
        "warmup": "0.3s",
        "validity": LENIENT,
    },
    "telemetry": {"interval": "50ms"},
}


@pytest.mark.integration
def test_a_run_with_a_gpu_writes_samples_summary_and_csv(tmp_path):
    nvml = FakeNVML(processes=[999_999])
    m = run_with_nvml(tmp_path, SIM, nvml).metrics
    assert m["status"] == "ok"
    gpu = m["gpu"]
    assert gpu["available"] and gpu["interval_s"] == 0.05
    d = gpu["devices"][0]
    assert d["name"] == "NVIDIA H100 80GB HBM3" and d["uuid"] == "GPU-fake-0"
    assert d["utilization_gpu_pct"]["mean"] == 80 and d["power_w"]["max"] == 300.0
    assert d["peak_memory_mib"] == 10 * 1024
    # the counter is read every 4th sample; the fake adds 75 J a reading
    rows = [
        r
        for r in csv.DictReader(io.StringIO((tmp_path / "run" / "gpu.csv").read_text()))
        if r["energy [J]"]
    ]
    assert [float(r["energy [J]"]) for r in rows[:3]] == [0.0, 75.0, 150.0]
    assert d["energy_j"] % 75 == 0 and d["energy_j"] > 0
    assert d["throttle_reasons_seen"] == ["sw_power_cap"]
    assert d["unavailable"] == {
        "gpm": "GPM metrics need a Hopper or newer GPU (and driver support)"
    }
    assert gpu["sampler"]["errors"] == 0 and gpu["sampler"]["cpu_pct_of_one_core"] is not None
    rows = list(csv.DictReader(io.StringIO((tmp_path / "run" / "gpu.csv").read_text())))
    assert len(rows) == gpu["sampler"]["samples"] and rows[0]["utilization.gpu [%]"] == "80"
    assert (
        rows[0]["clocks_event_reasons.active [bitmask]"] == "0x4"
        and rows[0]["gpm.sm_activity [%]"] == ""
    )
    t = [float(r["t_s"]) for r in rows]
    assert (
        t == sorted(t) and t[0] < 0.1 and t[-1] >= m["window"]["end_s"]
    )  # from t0 to the end of the drain
    warnings = " ".join(m["validity"]["warnings"])
    assert "throttled during the window: sw_power_cap" in warnings
    assert "other processes at start: pid 999999" in warnings  # a foreign process, not ours
    assert m["environment"]["gpus"][0]["processes_at_start"] == [
        {"pid": 999999, "used_mib": 512.0, "ours": False}
    ]


@pytest.mark.integration
def test_unsupported_metrics_and_errors_mid_run_never_fail_it(tmp_path):
    nvml = FakeNVML(
        unsupported={
            "nvmlDeviceGetPowerUsage",
            "nvmlDeviceGetTotalEnergyConsumption",
            "nvmlDeviceGetPcieThroughput",
        },
        fail_calls={
            "nvmlDeviceGetUtilizationRates": {3, 4, 5},
            "nvmlDeviceGetMemoryInfo": set(range(2, 1000)),
        },
    )
    m = run_with_nvml(tmp_path, SIM, nvml).metrics
    assert m["status"] == "ok"
    d = m["gpu"]["devices"][0]
    assert d["power_w"] is None and d["energy_j"] is None and d["joules_per_output_token"] is None
    assert set(d["unavailable"]) >= {"power.draw", "energy", "pcie.tx", "pcie.rx"}
    assert m["gpu"]["sampler"]["errors"] >= 3  # counted, the samples kept without those values
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 1  # unsupported: asked once, then left alone
    assert d["utilization_gpu_pct"]["mean"] == 80


@pytest.mark.integration
def test_no_nvml_says_why_and_the_run_proceeds(tmp_path, monkeypatch):
    from loadtest.config.loading import load_scenario
    from loadtest.session import run_scenario
    from tests.conftest import write_scenario

    monkeypatch.setattr(
        gpu_sampler, "load_nvml", lambda: (None, "NVML unavailable: driver not loaded")
    )
    m = run_scenario(load_scenario(write_scenario(tmp_path, SIM)), tmp_path / "run").metrics
    assert m["status"] == "ok" and m["gpu"] == {
        "available": False,
        "reason": "NVML unavailable: driver not loaded",
    }
    assert not (tmp_path / "run" / "gpu.csv").exists()


def test_a_device_lost_mid_run_keeps_the_run(monkeypatch):
    """Every reading fails after the first tick (the GPU fell off the bus): samples stay, values go."""
    fails = {
        name: set(range(2, 10_000))
        for name in (
            "nvmlDeviceGetUtilizationRates",
            "nvmlDeviceGetMemoryInfo",
            "nvmlDeviceGetPowerUsage",
            "nvmlDeviceGetTotalEnergyConsumption",
            "nvmlDeviceGetClockInfo",
            "nvmlDeviceGetTemperature",
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetPcieThroughput",
        )
    }
    s = GpuSampler(0.01, nvml=FakeNVML(fail_calls=fails))
    s.start()
    time.sleep(0.1)
    s.stop()
    assert len(s.rows) >= 3 and s.errors > 0
    assert s.rows[0]["utilization.gpu"] == 80 and "utilization.gpu" not in s.rows[-1]
    summary = s.summary(s.rows[0]["t_ns"], None, None)
    assert summary.devices[0].utilization_gpu_pct.max == 80


def test_energy_agrees_with_integrated_power():
    """300 W constant and 75 J per 250 ms reading: the counter and the integral agree."""
    s = GpuSampler(0.25, nvml=FakeNVML())
    s.start()
    s.stop()  # one tick at start, one at stop: replace with a scripted series
    t0 = 1_000_000_000
    d = s.devices[0]
    s.rows = [
        {
            "t_ns": t0 + k * 250_000_000,
            "index": 0,
            "power.draw": 300.0,
            **({"energy": 75.0 * k} if 1 <= k <= 7 else {}),
        }
        for k in range(9)
    ]
    out = s.summary(t0, None, 100).devices[0]
    # counter read at 0.25 s .. 1.75 s: 450 J over 1.5 s; power integrated over the same span agrees
    assert (out.energy_j, out.energy_span_s, out.energy_integrated_j) == (
        450.0,
        1.5,
        450.0,
    )
    assert out.joules_per_output_token == 450 / 1.5 * 2.0 / 100  # scaled to the 2 s window: 6 J
    assert d.name == "NVIDIA H100 80GB HBM3"


def test_environment_manifest_from_nvml():
    env = environment.gpu_manifest(FakeNVML(processes=[1])).view()
    assert env["gpu_driver"] == "580.00" and env["cuda_driver"] == "13.0"
    g = env["gpus"][0]
    assert g["clocks_mhz"] == {"sm": 1980, "mem": 2619, "sm_max": 1980, "mem_max": 2619}
    assert (
        g["power_limit_w"] == 700.0
        and g["ecc"] == {"current": 1, "pending": 1}
        and g["persistence_mode"] == 1
    )


def test_debug_flags_are_warned(monkeypatch):
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    env = environment.collect(gpus=False)
    assert env.debug_flags == {"CUDA_LAUNCH_BLOCKING": "1"}
    assert any("CUDA_LAUNCH_BLOCKING=1" in w for w in environment.warnings(env))


@pytest.mark.integration
def test_loadtest_env_prints_the_manifest():
    import json
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "loadtest", "env", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    env = json.loads(r.stdout)
    assert env["tool"] == "loadtest" and "python" in env and "gpus" in env


@pytest.mark.integration
def test_a_gpm_reading_that_is_not_a_number_is_left_out_not_averaged(tmp_path):
    # A GPM metric NVML computes can come back NaN (a rate over a too-short interval): that
    # sample lacks the metric; the others are summarised, and the result stays valid JSON.
    nvml = FakeNVML(gpm_values=lambda n: float("nan") if n % 2 else 25.0)
    m = run_with_nvml(tmp_path, SIM, nvml).metrics
    d = m["gpu"]["devices"][0]
    assert "gpm" not in d["unavailable"]
    assert d["gpm_sm_activity_pct"]["mean"] == 25.0 and d["gpm_dram_bw_util_pct"]["max"] == 25.0
    assert not any("finite" in w for w in m["validity"]["warnings"])
    rows = list(csv.DictReader(io.StringIO((tmp_path / "run" / "gpu.csv").read_text())))
    assert {r["gpm.sm_activity [%]"] for r in rows} == {"", "25"}


def test_a_server_on_another_host_never_gets_this_hosts_gpus_as_its_own():
    """telemetry.gpu: auto samples this host's GPUs for in-process engines and local servers,
    not for a server elsewhere (they would be reported as if they were its GPUs)."""
    from loadtest.config.scenario import Scenario
    from loadtest.session.telemetry import gpu_off_reason as _gpu_off_reason

    def sc(url: str, gpu="auto") -> Scenario:
        return Scenario.model_validate(
            {
                "name": "s",
                "backend": {"kind": "openai", "base_url": url, "model": "m"},
                "load": {"arrival": {"kind": "burst"}, "requests": 1},
                "telemetry": {"gpu": gpu},
            }
        )

    assert _gpu_off_reason(sc("http://127.0.0.1:8000/v1")) is None
    assert _gpu_off_reason(sc("http://localhost:8000/v1")) is None
    assert _gpu_off_reason(sc("unix:///run/vllm.sock:/v1")) is None  # a socket: this host
    remote = _gpu_off_reason(sc("http://gpu-box.example:8000/v1"))
    assert remote is not None and "not on this host" in remote
    assert _gpu_off_reason(sc("http://gpu-box.example:8000/v1", gpu=True)) is None
    assert _gpu_off_reason(sc("http://127.0.0.1:8000/v1", gpu=False)) == "telemetry.gpu: false"
