"""Stopping on a signal: SIGINT, SIGTERM and SIGHUP stop whatever is under way (loading, warm-up
or the run) so that the partial result is written with ``status: interrupted``; later signals
change nothing, and a stop that cannot finish within the grace period exits anyway."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from loadtest.core import exit_codes

if TYPE_CHECKING:
    from loadtest.execution.runner import Runner
    from loadtest.execution.workers import WorkerGroup


class StopOnSignals:
    """The signal handling of a session: what it stops is its runner and its start-up."""

    handle_signals: bool
    grace_s: float
    interrupted_by: str | None
    _restore_signals: Callable[[], None] | None
    _runner: Runner | WorkerGroup | None
    _starting: asyncio.Future | None

    def _install_signals(self) -> None:
        if not self.handle_signals or self._restore_signals is not None:
            return
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

        def restore() -> None:
            for sig in installed:
                loop.remove_signal_handler(sig)
                if self.interrupted_by is not None:
                    # the process is on its way out with the result written: a late signal
                    # (a second from `timeout`) must not kill it mid-report with another code
                    signal.signal(sig, signal.SIG_IGN)

        self._restore_signals = restore

    def _on_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        code = exit_codes.SIGNALS.get(name, exit_codes.INTERRUPTED)
        if self.interrupted_by is not None:
            # already stopping: however many signals come (coreutils `timeout` sends two, to
            # the process and to its group), the partial result is written first; the grace
            # timer bounds the wait
            sys.stderr.write(
                f"\nloadtest: {name}: already stopping; writing the partial result "
                f"(at most {self.grace_s:g} s)\n"
            )
            return
        self.interrupted_by = name
        sys.stderr.write(f"\nloadtest: {name}: stopping and writing the partial result\n")
        if self._runner is not None:
            self._runner.request_stop("interrupted")
        if self._starting is not None:
            self._starting.cancel()
        timer = threading.Timer(self.grace_s, _give_up, (name, code, self.grace_s))
        timer.daemon = True
        timer.start()


def _give_up(name: str, code: int, grace_s: float) -> None:
    sys.stderr.write(
        f"loadtest: {name}: could not stop within {grace_s:g} s; exiting without writing a result\n"
    )
    os._exit(code)
