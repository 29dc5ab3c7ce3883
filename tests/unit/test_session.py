"""The session alone, on the virtual clock: one typed result per point, whatever happened."""

from __future__ import annotations

import json

import pytest
import yaml

from loadtest.config.loading import load_scenario
from loadtest.core.clock import run_virtual
from loadtest.results.model import read_run
from loadtest.session import Session

SIM = {
    "name": "s",
    "backend": {"kind": "sim", "max_concurrency": 2, "decode_ms_per_token": 1},
    "workload": {"input_tokens": 4, "output_tokens": 4},
    "load": {"arrival": {"kind": "constant", "rate": 20}, "duration": "2s"},
    "sla": {"ttft_p99": "1s"},
    "telemetry": {"gpu": False},
}


def write(tmp_path, data, name="s.yml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def test_two_points_share_one_backend_and_each_writes_a_readable_result(tmp_path):
    a = load_scenario(write(tmp_path, SIM))
    b = load_scenario(
        write(tmp_path, {**SIM, "backend": {**SIM["backend"], "max_concurrency": 4}}, "b.yml")
    )

    async def go(clock):
        session = Session(clock)
        try:
            first = await session.run_point(a, tmp_path / "a")
            backend = session.backend
            second = await session.run_point(b, tmp_path / "b")
            assert session.backend is backend  # the sim reconfigures live: no reload
            return first, second
        finally:
            await session.close()

    first, second = run_virtual(go)
    for result, out in ((first, tmp_path / "a"), (second, tmp_path / "b")):
        assert result.status == "ok" and result.result.requests.completed == 40
        assert read_run(out / "metrics.json") == result.result  # what was written is what it says
    # 40 samples cannot show a p99 at 99% confidence: INCONCLUSIVE, with what it would need
    check = first.result.sla.checks[0]
    assert (first.sla_verdict, check.verdict, check.samples, check.samples_needed) == (
        "INCONCLUSIVE",
        "INCONCLUSIVE",
        40,
        459,
    )


@pytest.mark.integration
def test_a_backend_that_cannot_start_gives_a_failed_result_of_the_same_type(tmp_path):
    import socket

    from loadtest.session import run_scenario

    with socket.socket() as s:  # a port nobody listens on: the connection is refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bad = {
        **SIM,
        "backend": {"kind": "openai", "base_url": f"http://127.0.0.1:{port}/v1", "model": "m"},
    }
    result = run_scenario(load_scenario(write(tmp_path, bad)), tmp_path / "run")
    saved = read_run(tmp_path / "run" / "metrics.json")
    assert saved.status == result.status == "failed" and not saved.measured
    assert saved.validity.valid is False and "backend failed to start" in saved.validity.reasons[0]
    assert saved.requests.planned == 40 and saved.requests.never_sent == 40
    assert saved.latency_ms is None and saved.sla is None


def test_a_full_disk_for_the_exports_keeps_metrics_json(run_virtual_fn, tmp_path, monkeypatch):
    """metrics.json is written first; an export that cannot be written (ENOSPC) is a warning
    in it, and the other exports are still tried."""
    import errno

    from loadtest.core import atomic

    def full(path, rows):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "write_jsonl", full)
    m = run_virtual_fn(
        {
            "name": "full",
            "backend": {"kind": "noop"},
            "workload": {"input_tokens": 4, "output_tokens": 2},
            "load": {"arrival": {"kind": "constant", "rate": 10}, "requests": 5},
            "outputs": {"requests_jsonl": True},
        }
    )
    assert m["status"] == "ok" and m["requests"]["completed"] == 5
    assert (
        "the per-request exports could not all be written: requests.jsonl (No space left on "
        "device)" in m["validity"]["warnings"]
    )
    run = tmp_path / "run"
    saved = json.loads((run / "metrics.json").read_text())
    assert saved["validity"]["warnings"] == m["validity"]["warnings"]
    assert (run / "requests.csv").is_file() and not (run / "requests.jsonl").exists()


def test_a_starting_backend_is_said_while_it_starts(tmp_path):
    """What loads is said before it loads, every 10 s that it still does, and when it is ready;
    nothing where progress is not wanted (-q)."""
    import asyncio

    from loadtest.config.loading import load_scenario
    from loadtest.core.clock import MonotonicClock
    from loadtest.session import loaded_backend
    from tests.conftest import write_scenario

    path = write_scenario(
        tmp_path,
        {"name": "s", "backend": {"kind": "sim"}, "workload": {"input_tokens": 1, "output_tokens": 1},
         "load": {"arrival": {"kind": "constant", "rate": 1}, "duration": "1s"}},
    )  # fmt: skip
    said: list[str] = []

    async def go(say):
        lb = loaded_backend.LoadedBackend(MonotonicClock(), say=say)
        await lb.ensure(load_scenario(path), 1.0)
        await lb.close()

    asyncio.run(go(said.append))
    assert said[0] == "loadtest: starting the sim backend: loading and warming up"
    assert said[-1].startswith("loadtest: the sim backend ready in ")
    from loadtest.session import Session

    async def nothing(runner) -> None:
        return None

    assert Session(MonotonicClock()).loaded.say is None  # -q: no progress, nothing said
    assert Session(MonotonicClock(), progress=nothing).loaded.say is not None
