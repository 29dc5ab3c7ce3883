"""``loadtest plan`` and ``validate``: whether a scenario's window can decide its SLA, said
before it runs."""

from __future__ import annotations

from typer.testing import CliRunner

from loadtest.cli import app
from tests.conftest import write_scenario

SHORT = {
    "name": "short",
    "backend": {"kind": "sim"},
    "workload": {"input_tokens": 8, "output_tokens": 11},
    "load": {"arrival": {"kind": "constant", "rate": 5}, "duration": "20s"},
    "sla": {"ttft_p99": "1s", "itl_p99": "50ms"},
}


def test_plan_says_which_checks_the_window_decides_and_how_long_would(tmp_path):
    path = write_scenario(tmp_path, SHORT)
    r = CliRunner().invoke(app, ["plan", str(path)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert (
        lines[0]
        == f"{path}: a 20 s window of 100 measured requests (5 req/s), at most 1,000 gaps between tokens"
    )
    assert lines[1] == "SLA checks, at 99% confidence:"
    assert lines[2].startswith("  ttft_p99: needs >= 459 requests with none over the limit")
    assert "this window plans 100: too few, INCONCLUSIVE at best" in lines[2]
    assert "this window plans 1,000: decides" in lines[3]


def test_validate_names_the_checks_a_window_cannot_pass(tmp_path):
    path = write_scenario(tmp_path, SHORT)
    r = CliRunner().invoke(app, ["validate", str(path)])
    assert r.exit_code == 0
    assert "too few to PASS ttft_p99 needs >= 459 requests" in r.output
    assert "itl_p99" not in r.output
    long = CliRunner().invoke(app, ["validate", str(path), "--set", "load.duration=120s"])
    assert long.output.strip() == f"ok: {path}"
