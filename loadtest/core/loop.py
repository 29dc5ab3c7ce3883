"""The event loop a run goes on: uvloop where it is installed (the ``http`` extra), else
asyncio's own; ``LOADTEST_EVENT_LOOP=asyncio`` (or ``uvloop``, to insist) chooses.

uvloop does the loop's per-read work in C (libuv): a streamed token costs the client less CPU
(``bench/token_capacity.py`` measures both loops side by side). Nothing is timed differently:
every stamp is ``time.monotonic_ns()`` on either, and both loops' timers round to whole
milliseconds, which is why the clock spins the last stretch before a deadline
(``core.clock.MonotonicClock``). The loop that ran is in the result's environment.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from loadtest.core.errors import ScenarioError

T = TypeVar("T")

ENV = "LOADTEST_EVENT_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")


def _use_uvloop() -> bool:
    choice = os.environ.get(ENV, "").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ScenarioError([f"{ENV}={choice[:40]!r}: expected one of {', '.join(CHOICES)}"])
    if choice == "asyncio":
        return False
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if choice == "uvloop":
            raise ScenarioError(
                [f"{ENV}=uvloop, but uvloop is not installed (pip install 'llm-loadtest[http]')"]
            ) from None
        return False
    return True


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the chosen loop."""
    try:
        use_uvloop = _use_uvloop()
    except ScenarioError:
        main.close()  # never awaited: no warning about it on top of the error
        raise
    if use_uvloop:
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


async def in_daemon_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a daemon thread of its own, awaited. Unlike ``asyncio.to_thread`` (the
    loop's executor, whose threads the loop's close and the interpreter's exit wait for), a
    call left running when its awaiter gives up (a start timeout, a signal) holds nothing up:
    a tokenizer's import that outlived a failed start delayed the exit by 12 s."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if future.done():  # its awaiter gave up
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    def work() -> None:
        try:
            result, exc = fn(*args), None
        except BaseException as error:  # handed to the awaiter, whatever it is
            result, exc = None, error
        try:
            loop.call_soon_threadsafe(settle, result, exc)
        except RuntimeError:  # the loop closed meanwhile: nobody is waiting
            pass

    threading.Thread(target=work, name=getattr(fn, "__name__", "call"), daemon=True).start()
    return await future


def read_pipe_on_loop(fd: int, callback: Callable[..., object], *args: Any) -> None:
    """``add_reader`` for a pipe read and written whole, message by message (multiprocessing's):
    the callback runs when it is readable, and the pipe stays blocking as it was. uvloop's
    ``add_reader`` makes it non-blocking (asyncio's does not), and then a message bigger than
    the pipe's buffer fails half-read or half-written, as if the other end were gone."""
    asyncio.get_running_loop().add_reader(fd, callback, *args)
    os.set_blocking(fd, True)


def running() -> str:
    """The running loop, for the environment manifest: ``uvloop 0.23.0``, ``asyncio`` (a
    virtual-time loop is asyncio's), or ``none`` outside one."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return "none"
    if type(loop).__module__.startswith("uvloop"):
        import uvloop

        return f"uvloop {uvloop.__version__}"
    return "asyncio"
