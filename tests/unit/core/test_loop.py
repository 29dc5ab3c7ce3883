"""The event loop a run goes on: uvloop where installed, asyncio's own on request, a clear error
for anything else; the result's environment names the one that ran."""

from __future__ import annotations

import asyncio
import sys
import warnings

import pytest

from loadtest.core import loop
from loadtest.core.errors import ScenarioError
from loadtest.telemetry import environment


async def _which() -> str:
    return loop.running()


async def _manifest() -> dict:
    return environment.collect(gpus=False)


def test_asyncio_on_request(monkeypatch):
    monkeypatch.setenv(loop.ENV, "asyncio")
    assert loop.run(_which()) == "asyncio"
    assert loop.run(_manifest())["event_loop"] == "asyncio"


def test_uvloop_by_default_where_installed(monkeypatch):
    uvloop = pytest.importorskip("uvloop")
    monkeypatch.delenv(loop.ENV, raising=False)
    assert loop.run(_which()) == f"uvloop {uvloop.__version__}"
    monkeypatch.setenv(loop.ENV, " UVLOOP ")  # case and spaces as a shell may leave them
    assert loop.run(_manifest())["event_loop"] == f"uvloop {uvloop.__version__}"


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an import of a missing module sees
    monkeypatch.setenv(loop.ENV, "auto")
    assert loop.run(_which()) == "asyncio"
    monkeypatch.setenv(loop.ENV, "uvloop")
    with pytest.raises(ScenarioError, match=r"LOADTEST_EVENT_LOOP=uvloop, but uvloop is not"):
        loop.run(_which())


def test_an_unknown_loop_is_a_clear_error_and_leaves_no_unawaited_coroutine(monkeypatch):
    monkeypatch.setenv(loop.ENV, "trio")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would be raised
        with pytest.raises(ScenarioError) as err:
            loop.run(_which())
    assert err.value.problems == [
        "LOADTEST_EVENT_LOOP='trio': expected one of auto, uvloop, asyncio"
    ]


def test_outside_a_loop():
    assert loop.running() == "none"


@pytest.mark.parametrize("choice", ["asyncio", "uvloop"])
def test_a_workers_pipe_carries_a_result_bigger_than_its_buffer_on_either_loop(monkeypatch, choice):
    """A worker reads its parent's messages through the loop (``add_reader``), which under
    uvloop made the pipe non-blocking: a result past the pipe's 64 KiB failed half-sent and the
    run lost the worker. 1 MiB goes through whole, read by the other end as it comes."""
    import multiprocessing
    import threading

    from loadtest.execution.worker_side import _Inbox

    if choice == "uvloop":
        pytest.importorskip("uvloop")
    monkeypatch.setenv(loop.ENV, choice)
    ours, parents = multiprocessing.Pipe()
    big = ("done", b"x" * (1 << 20))
    got: list = []

    async def go() -> None:
        _Inbox(ours, None)  # type: ignore[arg-type]
        reader = threading.Thread(target=lambda: got.append(parents.recv()))
        reader.start()
        ours.send(big)
        reader.join(30)
        asyncio.get_running_loop().remove_reader(ours.fileno())

    loop.run(go())
    assert got == [big]
