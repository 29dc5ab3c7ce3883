"""The bench server's true gaps (``tests/fast_openai_server.py``): what every client's ITL error
in ``bench/token_capacity.py`` is measured against."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")

WRITE_NS = 300_000  # what each write costs the server, on its clock


def _server_module():
    path = Path(__file__).resolve().parents[1] / "fast_openai_server.py"
    spec = importlib.util.spec_from_file_location("fast_openai_server_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_true_gap_is_between_a_streams_own_writes_as_the_steps_order_changes(monkeypatch):
    """Streams A (2 tokens) and B (3) in one step each turn; every write takes 0.3 ms of the
    server's clock. A writes at 0 and 0.6 ms, B at 0.3, 0.9 and then, A done, first in its step,
    at 1.2 ms: B's gaps are 0.6 and 0.3 ms, not the steps' 0.6 and 0.6."""
    server = _server_module()
    clock = [0]
    monkeypatch.setattr(server.time, "monotonic_ns", lambda: clock[0])

    class Writer:
        async def write(self, data: bytes) -> None:
            clock[0] += WRITE_NS

    async def main() -> list[int]:
        engine = server.Engine(0.001, " t")
        loop = asyncio.get_running_loop()
        a, b = loop.create_future(), loop.create_future()
        engine.running = [[Writer(), 2, b"x", None, a], [Writer(), 3, b"x", None, b]]
        engine.task = asyncio.create_task(engine._steps())
        await asyncio.wait_for(asyncio.gather(a, b), 5)
        engine.task.cancel()
        return engine.gaps

    gaps = asyncio.run(main())
    assert sorted(gaps) == [300_000, 600_000, 600_000]
