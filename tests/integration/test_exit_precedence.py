"""One exit-code precedence for run, run --repeat, sweep and gate: the same saved run gives
`run` and `gate` the same code, and a verdict decides on a run invalid only for the client's
own lateness (docs/outputs.md#one-precedence)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_scenario

pytestmark = pytest.mark.integration

LATE = {"max_dispatch_lag_p99": "1us"}  # every run's sends are later than this: invalid, late
FEW = {"min_completed": 1_000_000}  # invalid for a reason no check can take into account


def scenario(tmp_path: Path, name: str, validity: dict, sla: dict | None) -> Path:
    data = {
        "name": name,
        "backend": {"kind": "sim", "max_concurrency": 8, "decode_ms_per_token": 2},
        "workload": {"input_tokens": 50, "output_tokens": 4},
        "load": {
            "arrival": {"kind": "constant", "rate": 40},
            "duration": "2s",
            "validity": validity,
        },
        "telemetry": {"gpu": False},
    }
    if sla:
        data["sla"] = sla
    return write_scenario(tmp_path, data, f"{name}.yml")


def loadtest(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "loadtest", *map(str, args)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


@pytest.mark.parametrize(
    "name, validity, sla, code",
    [
        ("late-fail", LATE, {"e2e_p50": "1ms"}, 1),
        ("late-pass", LATE, {"e2e_p50": "10s"}, 0),
        ("few-pass", FEW, {"e2e_p50": "10s"}, 3),
        ("late-none", LATE, None, 3),
    ],
)
def test_run_and_gate_exit_alike(tmp_path, name, validity, sla, code):
    path = scenario(tmp_path, name, validity, sla)
    run = loadtest("run", path, "-o", tmp_path / "run", "-q", "--no-report")
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["status"] == "invalid"
    assert m["validity"]["client_lateness_only"] is (validity is LATE), m["validity"]
    assert run.returncode == code, (run.stdout[-1500:], run.stderr[-1500:])
    if sla:
        assert m["sla"]["reasons"] if code else True
        gate = loadtest("gate", tmp_path / "run", "--sla", path)
        assert gate.returncode == code, gate.stdout[-1500:]
        assert f"gate {m['sla']['verdict']}" in gate.stdout or code == 0


def test_a_repeat_set_exits_by_the_same_precedence(tmp_path):
    fail = scenario(tmp_path, "late-fail", LATE, {"e2e_p50": "1ms"})
    r = loadtest("run", fail, "--repeat", "2", "-o", tmp_path / "fail", "-q", "--no-report")
    assert r.returncode == 1, r.stdout[-1500:]
    ok = scenario(tmp_path, "late-pass", LATE, {"e2e_p50": "10s"})
    r = loadtest("run", ok, "--repeat", "2", "-o", tmp_path / "pass", "-q", "--no-report")
    assert r.returncode == 0, r.stdout[-1500:]
    assert loadtest("gate", tmp_path / "pass", "--sla", ok).returncode == 0


def test_a_grid_sweep_is_a_curve_not_a_verdict(tmp_path):
    """Its points' SLAs do not set its code; no valid point does (3)."""
    ok = scenario(tmp_path, "fine", {}, {"e2e_p50": "1ms"})  # every point FAILs its SLA
    r = loadtest("sweep", ok, "--set", "load.duration=1s", "--rates", "20,40",
                 "-o", tmp_path / "sweep", "-q")  # fmt: skip
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    few = scenario(tmp_path, "few", FEW, None)
    r = loadtest("sweep", few, "--set", "load.duration=1s", "--rates", "20,40",
                 "-o", tmp_path / "few", "-q")  # fmt: skip
    assert r.returncode == 3 and "no point's run was valid" in r.stdout, r.stdout[-1500:]
