"""A pytest plugin: a SIGTERM (a CI job's timeout, ``timeout``, a supervisor) unwinds the test
session as Ctrl-C does, so the fixtures' finalizers run. The real servers the fixtures start
(vLLM, ``transformers serve``) are each in a session of their own, out of reach of the
terminal's signals; a pytest killed without its finalizers would leave them running, gigabytes
and a share of a core each, under whatever runs next."""

from __future__ import annotations

import signal


def pytest_sessionstart(session) -> None:
    def interrupt(signum: int, frame) -> None:
        raise KeyboardInterrupt(f"signal {signum}: stopping, servers first")

    signal.signal(signal.SIGTERM, interrupt)
