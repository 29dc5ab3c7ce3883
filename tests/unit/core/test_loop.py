"""The event loop a run goes on: uvloop where installed, asyncio's own on request, a clear error
for anything else; the result's environment names the one that ran."""

from __future__ import annotations

import asyncio
import os
import sys
import warnings

import pytest

from loadtest.core import loop
from loadtest.core.errors import ScenarioError
from loadtest.telemetry import environment


async def _which() -> str:
    return loop.running()


async def _manifest() -> dict:
    return environment.collect(gpus=False).view()


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
def test_a_pipe_read_on_the_loop_carries_messages_bigger_than_its_buffer(monkeypatch, choice):
    """A worker and its parent each read their pipe through the loop. Under uvloop that made
    the pipe non-blocking, and a message past the pipe's 64 KiB failed half-sent or half-read,
    as if the other end were gone: the run lost the worker. 1 MiB goes through whole, both
    ways: read on the loop at one end, and sent on the loop at the other."""
    import multiprocessing
    import threading

    if choice == "uvloop":
        pytest.importorskip("uvloop")
    monkeypatch.setenv(loop.ENV, choice)
    ours, theirs = multiprocessing.Pipe()
    big = ("done", b"x" * (1 << 20))
    got: list = []

    async def go() -> None:
        done = asyncio.get_running_loop().create_future()

        def readable() -> None:
            got.append(ours.recv())  # a whole message, however it arrives
            done.set_result(None)

        loop.read_pipe_on_loop(ours.fileno(), readable)
        assert os.get_blocking(ours.fileno())  # as the pipe was made
        reader = threading.Thread(target=lambda: got.append(theirs.recv()))
        reader.start()
        ours.send(big)  # out through the pipe the loop reads
        reader.join(30)
        threading.Thread(target=theirs.send, args=(big,)).start()
        await asyncio.wait_for(done, 30)
        asyncio.get_running_loop().remove_reader(ours.fileno())

    loop.run(go())
    assert got == [big, big]


@pytest.mark.parametrize("choice", ["asyncio", "uvloop"])
def test_a_call_left_running_on_a_daemon_thread_holds_up_no_exit(choice):
    """A 60 s call given up after 0.1 s (as a start timeout gives up a tokenizer's load): the
    loop closes and the interpreter exits at once, where ``asyncio.to_thread``'s would wait
    the 60 s out; a call that finishes hands back its result, and its exception."""
    if choice == "uvloop":
        pytest.importorskip("uvloop")
    import subprocess
    import time

    code = """
import asyncio, time
from loadtest.core import loop

async def main():
    assert await loop.in_daemon_thread(sum, [1, 2, 3]) == 6
    try:
        await loop.in_daemon_thread(int, "x")
    except ValueError:
        pass
    else:
        raise AssertionError("the exception was not handed back")
    try:
        await asyncio.wait_for(loop.in_daemon_thread(time.sleep, 60), 0.1)
    except asyncio.TimeoutError:
        return "gave up"

print(loop.run(main()))
"""
    t = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50,
        env={**os.environ, loop.ENV: choice},
    )  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == "gave up", r.stderr
    assert time.monotonic() - t < 30  # not the 60 s sleep
