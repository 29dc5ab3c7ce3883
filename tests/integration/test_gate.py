"""loadtest gate: three-valued verdicts from a saved run, JUnit that a JUnit parser reads, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from xml.etree import ElementTree as ET

import pytest

from loadtest.config.loading import load_scenario
from loadtest.core.clock import run_virtual
from loadtest.session import run_scenario_async

RUN = {
    "name": "g",
    "backend": {
        "kind": "sim",
        "max_concurrency": 4,
        "prefill_ms_per_token": 0.1,
        "decode_ms_per_token": 5,
    },
    "workload": {"input_tokens": 100, "output_tokens": 4},
    "load": {"arrival": {"kind": "poisson", "rate": 50}, "duration": "20s"},
}


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
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtest",
            "gate",
            str(run_dir),
            "--sla",
            str(sla),
            *map(str, extra),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_pass_fail_inconclusive_exit_codes(run_dir, tmp_path):
    # ~1000 requests; TTFT = 10 ms (100 x 0.1 ms), ITL = 5 ms
    assert gate(run_dir, "ttft_p99: 50ms\nitl_p99: 20ms\n", tmp_path).returncode == 0
    assert gate(run_dir, "ttft_p50: 5ms\n", tmp_path).returncode == 1
    assert gate(run_dir, "ttft_p999: 50ms\n", tmp_path).returncode == 3  # p99.9 needs ~4600 samples


def test_junit_xml_one_case_per_check(run_dir, tmp_path):
    junit, md = tmp_path / "gate.xml", tmp_path / "summary.md"
    r = gate(
        run_dir,
        "ttft_p99: 50ms\nttft_p50: 5ms\nttft_p999: 50ms\n",
        tmp_path,
        "--junit",
        junit,
        "--markdown",
        md,
    )
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
    metrics["validity"] = {
        "valid": False,
        "reasons": ["dispatch lag p99 9 ms > 5 ms"],
        "warnings": [],
    }
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.json").write_text(json.dumps(metrics))
    r = gate(bad, "ttft_p99: 50ms\n", tmp_path)
    assert r.returncode == 3 and "INCONCLUSIVE" in r.stdout


# -- replicates, baselines, compare, run --gate (the real CLI, the real clock, the sim) ----------

FAST = """name: rep
backend: {kind: sim, max_concurrency: 4, prefill_ms_per_token: 0.1, decode_ms_per_token: 2}
workload: {input_tokens: 50, output_tokens: 8}
load: {arrival: {kind: poisson, rate: 100}, duration: 3s, warmup: 0.5s, validity: {max_dispatch_lag_p99: 1s, max_loop_lag_p99: 1s}}
sla: {ttft_p99: 1s}
"""  # real clock: a loaded CI machine must not make these runs invalid (not what is tested here)


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "loadtest", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture(scope="module")
def repeat_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("repeat")
    (tmp / "s.yml").write_text(FAST)
    r = cli("run", tmp / "s.yml", "--repeat", "3", "--out", tmp / "base", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    return tmp


def test_repeat_runs_replicates_with_successive_schedule_seeds(repeat_dir):
    doc = json.loads((repeat_dir / "base" / "repeat.json").read_text())
    assert doc["runs"] == ["rep-1", "rep-2", "rep-3"] and doc["schedule_seeds"] == [0, 1, 2]
    runs = [json.loads((repeat_dir / "base" / d / "metrics.json").read_text()) for d in doc["runs"]]
    assert [m["scenario"]["seeds"]["schedule"] for m in runs] == [0, 1, 2]
    p99s = sorted(m["latency_ms"]["ttft"]["p99"] for m in runs)
    s = doc["summary"]["ttft_p99"]
    assert (s["min"], s["median"], s["max"]) == tuple(p99s)
    # repeat.html: the median row, a link to each replicate's report, their curves overlaid
    page = (repeat_dir / "base" / "repeat.html").read_text()
    assert f"<td>ttft_p99</td><td class=n>{p99s[1]:.4g}</td>" in page
    assert all(f"<a href='{d}/report.html'>" in page for d in doc["runs"])
    assert all(f"ttft {d} p99:" in page for d in doc["runs"])
    assert all((repeat_dir / "base" / d / "report.html").exists() for d in doc["runs"])
    assert s["spread_pct"] == pytest.approx(100 * (p99s[2] - p99s[0]) / p99s[1])
    # the SLA is judged on the pooled samples of all three: more evidence than any one run
    pooled_n = sum(m["latency_ms"]["ttft"]["count"] for m in runs)
    assert (
        doc["sla"]["verdict"] == "PASS"
        and f"of {pooled_n} samples" in doc["sla"]["checks"][0]["reason"]
    )


def test_gate_against_a_replicated_baseline(repeat_dir, tmp_path):
    slow = tmp_path / "slow"
    r = cli(
        "run",
        repeat_dir / "s.yml",
        "--out",
        slow,
        "-q",
        "--set",
        "backend.decode_ms_per_token=2.6",
        "--set",
        "seeds.schedule=7",
        "--gate",
        "--baseline",
        repeat_dir / "base",
        "--junit",
        tmp_path / "j.xml",
        "--markdown",
        tmp_path / "s.md",
    )
    assert r.returncode == 1, r.stdout + r.stderr  # ITL +30%: a regression
    cases = {
        (c.get("classname"), c.get("name")): c
        for c in ET.parse(tmp_path / "j.xml").getroot().iter("testcase")
    }
    assert cases[("loadtest.regression", "itl_p50")].find("failure") is not None
    assert ("loadtest.sla", "ttft_p99") in cases
    md = (tmp_path / "s.md").read_text()
    assert (
        "| itl_p50 | FAIL |" in md and "decode_ms_per_token" in md
    )  # the scenarios differ: said so
    # the same scenario, another seed: no regression found (PASS or INCONCLUSIVE, never FAIL)
    same = tmp_path / "same"
    r = cli("run", repeat_dir / "s.yml", "--out", same, "-q", "--set", "seeds.schedule=9")
    assert (
        same / "metrics.json"
    ).exists()  # its own SLA verdict depends on this machine's load: not tested here
    r = cli(
        "gate",
        same,
        "--baseline",
        repeat_dir / "base",
        "--metric",
        "itl_p50",
        "--metric",
        "ttft_p50",
    )
    assert r.returncode in (0, 3), (
        r.stdout
    )  # the sim's p50s barely move: PASS, or INCONCLUSIVE on a loaded machine


def test_compare_prints_both_sides_and_the_change(repeat_dir):
    single = repeat_dir / "base" / "rep-1"
    r = cli("compare", repeat_dir / "base", single, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    by = {c["name"]: c for c in doc["metrics"]}
    one = json.loads((single / "metrics.json").read_text())
    assert by["ttft_p99"]["candidate"] == one["latency_ms"]["ttft"]["p99"]
    # one replicate against the pool it belongs to: the sim's ITL is the same by design, but it is
    # stamped on the real clock, so a loaded machine moves a p50 by a bucket (0.05% seen in CI)
    assert (
        by["itl_p50"]["change_pct"] == pytest.approx(0.0, abs=1.0)
        and by["itl_p50"]["significant"] is False
    )
    assert not (single / "compare-vs-base.html").exists()  # --json prints, writes nothing
    r = cli("compare", repeat_dir / "base", single)
    assert "significant" in r.stdout and "ttft_p99" in r.stdout
    page = (single / "compare-vs-base.html").read_text()  # beside B, named after A
    assert f"report: {single / 'compare-vs-base.html'}" in r.stdout.replace("\n", "")
    # the deltas table with B's own figure, and both runs' percentile curves overlaid
    assert f"<td class=n>{by['ttft_p99']['candidate']:.4g}</td>" in page
    assert page.count("ttft A base p50:") == 1 and page.count("ttft B rep-1 p50:") == 1


def test_gate_usage_errors(repeat_dir, tmp_path):
    assert cli("gate", repeat_dir / "base").returncode == 2  # neither --sla nor --baseline
    r = cli("gate", repeat_dir / "base", "--baseline", tmp_path)
    assert r.returncode == 2 and "no metrics.json" in r.stderr
    r = cli("gate", repeat_dir / "base", "--baseline", repeat_dir / "base", "--metric", "ttft_p42")
    assert r.returncode == 2 and "ttft_p42" in r.stderr
    assert (
        cli("run", repeat_dir / "s.yml", "--baseline", repeat_dir / "base").returncode == 2
    )  # needs --gate
