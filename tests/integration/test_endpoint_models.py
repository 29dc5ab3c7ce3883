"""Several endpoints of one model: each is asked what it serves and how it answers before the
run (one that serves or answers as another model is another deployment: refused, named), and
answers that name another model during the run are counted, per endpoint, and warned about."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("aiohttp")

from tests.real_servers import start_fast_server


def run(tmp_path, *urls: str, requests: int = 12) -> tuple[subprocess.CompletedProcess, dict]:
    args = [a for url in urls for a in ("--url", url)]
    r = subprocess.run(
        [sys.executable, "-m", "loadtest", "run", *args, "--model", "stub-model",
         "--concurrency", "2", "--requests", str(requests), "--output-tokens", "4",
         "-o", str(tmp_path / "run"), "-q", "--no-report",
         "--set", "load.validity.max_stamp_delay_share=1000"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    path = tmp_path / "run" / "metrics.json"
    return r, (json.loads(path.read_text()) if path.is_file() else {})


@pytest.mark.parametrize(
    "flags",
    [["--model", "other"], ["--answer-as", "other"]],
    ids=["lists_another_model", "answers_as_another_model"],
)
def test_an_endpoint_of_another_model_is_refused_before_the_run(tmp_path, flags):
    one, two = start_fast_server(), start_fast_server(*flags)
    try:
        r, m = run(tmp_path, one.url, two.url)
    finally:
        one.kill()
        two.kill()
    assert r.returncode == 4, r.stderr
    said = " ".join(m["validity"]["reasons"])  # and on the terminal
    assert two.url in said and "'other'" in said and "stub-model" in said
    assert m["requests"]["sent"] == 0  # nothing was measured


def test_answers_that_name_another_model_mid_run_are_counted_per_endpoint(tmp_path):
    one, two = (
        start_fast_server(),
        start_fast_server("--answer-as", "other", "--answer-as-after", "2"),
    )
    try:
        r, m = run(tmp_path, one.url, two.url, requests=20)
    finally:
        one.kill()
        two.kill()
    assert r.returncode in (0, 3), r.stderr
    http = m["backend"]["http"]
    # the second endpoint answered its start-up probe and one more as the model asked for,
    # then every later answer as 'other': round robin gave it 10 of the 20
    assert http["other_model"] == 9 and http[f"other_model@{two.url}"] == 9
    warning = next(w for w in m["validity"]["warnings"] if "named another model" in w)
    assert f"{two.url}: 9" in warning
