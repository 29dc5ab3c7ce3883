"""The Python heap during a measurement: frozen before t0, collected where a run has slack,
collections timed."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator


def settle_heap() -> None:
    """Before t0: collect once, then move every object alive now (in an engine worker the model,
    torch, transformers and compiled code: millions) out of the collector's reach. A full
    collection then scans only what the run allocates, instead of pausing a decode step or the
    dispatcher for as long as walking the whole heap takes (``gc.freeze``)."""
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection inside it (explicit ``gc.collect()`` calls still run): for a
    one-time phase that allocates much and keeps little, a compile above all, whose garbage is
    then collected once at its end (``settle_heap``) rather than in hundreds of passes that each
    walk what the phase has built so far; and for a run, collected where its dispatcher has
    slack (``collect_in_slack``). The collector is on again after it, however it ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


GC_YOUNG = 700  # CPython's own first-generation threshold
GC_FORCED = 100_000  # young objects past which a collection runs with or without slack
GC_SLACK_NS = 1_000_000  # the time a young collection may take, at most (~0.1 ms measured)


def collect_in_slack(due: int | None, now: Callable[[], int]) -> None:
    """The collector's work, done where the next send (due at ``due``, None: none is) is far
    enough away, automatic collection being off (``collector_paused``): the generation
    CPython would collect, at the same thresholds. A collection inside a send is dispatch lag."""
    young, middle, old = gc.get_count()
    if young < GC_YOUNG or (young < GC_FORCED and due is not None and now() + GC_SLACK_NS > due):
        return
    gc.collect(2 if old >= 10 else 1 if middle >= 10 else 0)


class GcPauses:
    """Time this process's garbage collections took (every generation), and the longest: in an
    engine worker a pause inside a decode step lengthens that step (reported per point with the
    worker's facts)."""

    def __init__(self) -> None:
        self._start = 0.0
        self.count, self.total_s, self.max_s = 0, 0.0, 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        dt = time.perf_counter() - self._start
        self.count += 1
        self.total_s += dt
        self.max_s = max(self.max_s, dt)

    def summary(self, reset: bool) -> dict:
        """Collections and their pause times since the last reset."""
        got = {
            "collections": self.count,
            "total_ms": round(self.total_s * 1e3, 3),
            "max_ms": round(self.max_s * 1e3, 3),
        }
        if reset:
            self.count, self.total_s, self.max_s = 0, 0.0, 0.0
        return got


_PROCESS_PAUSES: GcPauses | None = None


def process_gc_pauses() -> GcPauses:
    """This process's one ``GcPauses`` (one gc callback however many engines a process builds)."""
    global _PROCESS_PAUSES
    if _PROCESS_PAUSES is None:
        _PROCESS_PAUSES = GcPauses()
    return _PROCESS_PAUSES
