"""loadtest gate: three-valued verdicts from a saved run, JUnit that a JUnit parser reads, exit codes."""
from __future__ import annotations

import json
import subprocess
import sys
from xml.etree import ElementTree as ET

import pytest

from loadtest.clock import run_virtual
from loadtest.scenario_file import load_scenario
from loadtest.session import run_scenario_async

RUN = {"name": "g", "backend": {"kind": "sim", "max_concurrency": 4, "prefill_ms_per_token": 0.1, "decode_ms_per_token": 5},
       "workload": {"input_tokens": 100, "output_tokens": 4},
       "load": {"arrival": {"kind": "poisson", "rate": 50}, "duration": "20s"}}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    import yaml

    tmp = tmp_path_factory.mktemp("gate")
    (tmp / "s.yml").write_text(yaml.safe_dump(RUN))
    loaded = load_scenario(tmp / "s.yml")
    run_virtual(lambda clock: run_scenario_async(loaded, tmp / "run", clock=clock))
    return tmp / "run"


def gate(run_dir, sla_text, tmp_path, *extra):
    sla = tmp_path / "sla.yml"
    sla.write_text(sla_text)
    return subprocess.run([sys.executable, "-m", "loadtest", "gate", str(run_dir), "--sla", str(sla), *map(str, extra)],
                          capture_output=True, text=True, timeout=60)


def test_pass_fail_inconclusive_exit_codes(run_dir, tmp_path):
    # ~1000 requests; TTFT = 10 ms (100 x 0.1 ms), ITL = 5 ms
    assert gate(run_dir, "ttft_p99: 50ms\nitl_p99: 20ms\n", tmp_path).returncode == 0
    assert gate(run_dir, "ttft_p50: 5ms\n", tmp_path).returncode == 1
    assert gate(run_dir, "ttft_p999: 50ms\n", tmp_path).returncode == 3  # p99.9 needs ~4600 samples


def test_junit_xml_one_case_per_check(run_dir, tmp_path):
    junit, md = tmp_path / "gate.xml", tmp_path / "summary.md"
    r = gate(run_dir, "ttft_p99: 50ms\nttft_p50: 5ms\nttft_p999: 50ms\n", tmp_path, "--junit", junit, "--markdown", md)
    assert r.returncode == 1
    suite = ET.parse(junit).getroot()
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"ttft_p99", "ttft_p50", "ttft_p999"}
    assert cases["ttft_p50"].find("failure") is not None
    assert cases["ttft_p999"].find("skipped") is not None
    assert cases["ttft_p99"].find("failure") is None and cases["ttft_p99"].find("skipped") is None
    assert suite.get("failures") == "1" and suite.get("skipped") == "1"
    assert "**FAIL**" in md.read_text()


def test_bad_sla_file_exits_2(run_dir, tmp_path):
    r = gate(run_dir, "ttft_p101: 5ms\n", tmp_path)
    assert r.returncode == 2 and "ttft_p101" in r.stderr


def test_an_invalid_run_never_passes(run_dir, tmp_path):
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics["status"] = "invalid"
    metrics["validity"] = {"valid": False, "reasons": ["dispatch lag p99 9 ms > 5 ms"], "warnings": []}
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.json").write_text(json.dumps(metrics))
    r = gate(bad, "ttft_p99: 50ms\n", tmp_path)
    assert r.returncode == 3 and "INCONCLUSIVE" in r.stdout
