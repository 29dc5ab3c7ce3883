"""answers: each answer under load compared with the same request's answer alone, against a
known-truth server that answers differently whenever more than N requests are in flight: the
client's match rate is the server's planted one, and an SLA on it fails a release whose
latency passes."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest
import yaml

pytest.importorskip("aiohttp")

from tests.real_servers import start_fast_server


def scenario(tmp_path, url: str, answers: dict, sla: dict | None = None) -> str:
    data = {
        "name": "answers",
        "backend": {"kind": "openai", "base_url": url, "model": "stub-model", "api": "completions"},
        "workload": {"input_tokens": 16, "output_tokens": 6},
        "load": {
            "arrival": {"kind": "poisson", "rate": 60},
            "requests": 160,
            "validity": {"max_dispatch_lag_p99": "2s", "max_stamp_delay_share": 1000},
        },
        "answers": answers,
        "outputs": {"requests_jsonl": False},
    }
    if sla is not None:
        data["sla"] = sla
    path = tmp_path / "answers.yml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def run(path: str, out) -> tuple[subprocess.CompletedProcess, dict]:
    r = subprocess.run(
        [sys.executable, "-m", "loadtest", "run", path, "-o", str(out), "-q", "--no-report"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return r, json.loads((out / "metrics.json").read_text())


def server_counts(url: str) -> dict:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats", timeout=10) as r:
        return json.load(r)


def test_every_answer_compared_gives_the_servers_planted_match_rate_exactly(tmp_path):
    server = start_fast_server("--itl-ms", "8", "--diverge-above", "2")
    try:
        before = server_counts(server.url)  # its start-up probe's and model list's
        r, m = run(scenario(tmp_path, server.url, {"sample": 1.0}), tmp_path / "all")
        after = server_counts(server.url)
    finally:
        server.kill()
    assert r.returncode in (0, 3), r.stderr
    a = m["answers"]
    assert a["reference_requests"] == 160 and a["compared"] + a["unanswered"] == 160
    # the reference pass ran one at a time: nothing diverged in it; every measured answer the
    # server made differ is one the client found
    diverged = after["diverged"] - before["diverged"]
    assert 10 < diverged < 150, after  # a planted rate between the ends
    assert a["compared"] - a["matched"] == diverged
    lo, hi = a["match_interval"]
    assert lo <= a["match_rate"] <= hi
    # each diverged answer parts from its reference in its third token: " tok tok " (9
    # characters) is common to " tok tok tok..." and " tok tok alt..."
    assert a["first_divergence"] == {"min": 9.0, "p50": 9.0, "max": 9.0}
    assert a["compared_on"] == "text" and m["scenario"]["backend"]["extra_body"] == {
        "temperature": 0
    }


def test_a_sample_estimates_it_and_an_sla_on_it_fails_while_latency_passes(tmp_path):
    server = start_fast_server("--itl-ms", "8", "--diverge-above", "2")
    try:
        before = server_counts(server.url)
        path = scenario(
            tmp_path,
            server.url,
            {"sample": 40},
            sla={"answers_match_min": 0.99, "e2e_p90": "5s", "confidence": 0.95},
        )
        r, m = run(path, tmp_path / "sample")
        after = server_counts(server.url)
    finally:
        server.kill()
    a = m["answers"]
    assert a["reference_requests"] == 40 and a["compared"] == 40
    planted = 1 - (after["diverged"] - before["diverged"]) / 160
    lo, hi = a["match_interval"]
    assert lo <= planted <= hi  # the planted rate inside the measured one's 95% interval
    checks = {c["name"]: c["verdict"] for c in m["sla"]["checks"]}
    assert checks["e2e_p90"] == "PASS" and checks["answers_match"] == "FAIL"
    assert m["sla"]["verdict"] == "FAIL" and r.returncode == 1
    # and the gate, reading the saved run, says the same
    gate = subprocess.run(
        [sys.executable, "-m", "loadtest", "gate", str(tmp_path / "sample"), "--sla", path],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert gate.returncode == 1 and "answers_match" in gate.stdout + gate.stderr


def test_a_check_that_cannot_apply_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "bad.yml"
    path.write_text(
        "name: bad\nbackend: {kind: sim}\nload: {arrival: {kind: poisson, rate: 5}, requests: 5}\n"
        "answers: {sample: 3}\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "loadtest", "validate", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2 and "answers" in r.stderr and "kind: sim" in r.stderr
