"""The in-process backend a session keeps loaded from one point to the next: a point whose
spec changes only in what the backend takes live (the batcher's size and wait, say)
reconfigures it; any other change reloads it."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

from loadtest.backends import create_backend
from loadtest.backends.base import Backend, BackendContext, BackendInfo, Facts
from loadtest.config.backend_specs import BackendSpec
from loadtest.config.loading import LoadedScenario
from loadtest.core import secrets
from loadtest.core.clock import Clock
from loadtest.core.text import visible

# while a backend starts (a model loads and warms up: minutes for a real one, or with compile),
# a line says so this often
STARTING_EVERY_S = 10.0


class LoadedBackend:
    """The backend, what it said when it started, and the spec it runs. ``say``: where a line
    goes that says what is starting (None: quiet)."""

    def __init__(self, clock: Clock, say: Callable[[str], None] | None = None) -> None:
        self.clock = clock
        self.say = say
        self.backend: Backend | None = None
        self.info: BackendInfo | None = None
        self.spec: BackendSpec | None = None

    async def ensure(self, loaded: LoadedScenario, trace_ratio: float) -> BackendInfo:
        """The scenario's backend, started (or reconfigured); BackendError where it cannot be
        (nothing is left loaded)."""
        spec = loaded.scenario.backend
        if self.backend is not None and spec != self.spec:
            if not await self.backend.reconfigure(spec):
                await self.close()
            else:
                self.spec = spec
        if self.backend is None or self.info is None:
            otel = loaded.scenario.outputs.otel
            context = BackendContext(Path(loaded.base_dir), otel, trace_ratio)
            self.backend = create_backend(spec, self.clock, context)
            self.info = await self._started(self.backend, spec)
            self.spec = spec
            for notice in self.info.notices:  # before t0: the user reads it before the numbers
                sys.stderr.write(f"loadtest: {visible(secrets.scrub(notice))}\n")
        return self.info

    async def _started(self, backend: Backend, spec: BackendSpec) -> BackendInfo:
        """``backend.start()``, said while it works: what starts, every ``STARTING_EVERY_S``
        that it still does, and when it is ready."""
        say = self.say
        if say is None:
            return await backend.start()
        model = getattr(spec, "model", None)
        what = f"the {spec.kind} backend" + (f" ({visible(str(model))})" if model else "")
        say(f"loadtest: starting {what}: loading and warming up")
        began = time.monotonic()

        async def still() -> None:
            while True:
                await asyncio.sleep(STARTING_EVERY_S)
                say(f"loadtest: still starting {what}: {time.monotonic() - began:.0f} s")

        ticker = asyncio.create_task(still())
        try:
            info = await backend.start()
        finally:
            ticker.cancel()
        say(f"loadtest: {what} ready in {time.monotonic() - began:.1f} s")
        return info

    async def close(self) -> Facts:
        """The backend stopped; its last facts."""
        if self.backend is None:
            return {}
        backend, self.backend, self.info, self.spec = self.backend, None, None, None
        return await backend.stop()
