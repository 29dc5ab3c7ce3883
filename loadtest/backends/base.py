"""The backend contract: the system under test, seen from the session and the runner.

``start``, ``submit`` and ``stop`` are what every backend does. The other hooks have no-op
defaults here, so callers call them unconditionally (no ``hasattr`` probes) and a backend
overrides only what it has: live reconfiguration, warm-up, per-point facts, a measurement
origin, the window's start, a profiler.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeGuard, TypeVar

from loadtest.config.observing import Profile
from loadtest.config.spec import Spec
from loadtest.core.clock import Clock
from loadtest.core.events import BackendEvent, Cancelled
from loadtest.core.json_types import JsonObject
from loadtest.workload.plan import Plan
from loadtest.workload.requests import PlannedRequest
from loadtest.workload.tokenizer import Tokenizer

SpecT = TypeVar("SpecT", bound=Spec)

# What a backend says of itself and of a point (its kind, name, counters, warnings): JSON, as
# metrics.json's ``backend`` section keeps it; the fields generic code reads are typed there
# (``results.model.BackendFacts``).
Facts = JsonObject


@dataclass(frozen=True)
class BackendContext:
    """Where the backend runs from: the scenario's folder, where its relative paths resolve
    (a model directory, a CA bundle, a client certificate); and whether the run is traced."""

    base_dir: Path = field(default_factory=Path.cwd)
    # each request sends a W3C traceparent, its span exported by the run (outputs.otel), for
    # a share trace_ratio of them (OTEL_TRACES_SAMPLER)
    traced: bool = False
    trace_ratio: float = 1.0


@dataclass
class BackendInfo:
    """What was loaded, for the result: ``details`` lands in ``metrics.json`` as is."""

    name: str
    tokenizer: Tokenizer
    details: Facts = field(default_factory=dict)
    # said before the run starts (stderr), not after: what a user must know to read the numbers
    notices: list[str] = field(default_factory=list)


def combine_parts(parts: list[Facts]) -> Facts:
    """Several parts' facts as one: numbers summed, dicts merged alike, lists joined (each
    item once), anything else as the first part said it."""
    out: Facts = {}
    for part in parts:
        for key, value in part.items():
            have = out.get(key)
            if key not in out:
                out[key] = dict(value) if isinstance(value, dict) else value
            elif isinstance(value, dict) and isinstance(have, dict):
                out[key] = combine_parts([have, value])
            elif isinstance(value, list) and isinstance(have, list):
                out[key] = have + [v for v in value if v not in have]
            elif _number(value) and _number(have):
                out[key] = have + value
    return out


def _number(v: object) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


class Backend(Generic[SpecT]):
    """Base class of every backend kind (registered in ``loadtest.backends.REGISTRY``), made
    from its own kind's spec: ``OpenAIBackend`` is a ``Backend[OpenAISpec]``."""

    spec: SpecT

    needs_prompt_ids: bool = True  # False: the runner skips materialising prompt token ids
    supports_profiling: bool = False  # an in-process profiler window (profile_start/stop)
    # True: the backend stops a request the plan cancels itself (``req.stop_at_ns``,
    # ``req.stop_after_tokens``), and yields what it read and ``Cancelled``; False: it yields
    # tokens as they come, and the runner cancels it
    stops_itself: bool = False

    async def start(self) -> BackendInfo:
        """Load; return what was loaded. Called once, before the plan is built; bounded by the
        spec's ``start_timeout`` (with ``prepare``)."""
        raise NotImplementedError

    def submit(
        self, req: PlannedRequest, prompt_ids: list[int] | None
    ) -> AsyncGenerator[BackendEvent | Cancelled, None]:
        """Run one request; yield Sent / Admitted / Tokens / Finished or Failed, each stamped."""
        raise NotImplementedError

    def __init__(self, spec: SpecT, clock: Clock, context: BackendContext | None = None) -> None:
        self.spec, self.clock, self.context = spec, clock, context or BackendContext()

    @classmethod
    def create(
        cls, spec: SpecT, clock: Clock, context: BackendContext | None = None
    ) -> Backend[SpecT]:
        """The backend for ``spec`` (a kind may return another class's, a router say)."""
        return cls(spec, clock, context)

    async def stop(self) -> Facts:
        """Release everything; return end-of-run facts (``peak_mem_mb``, ...). Bounded."""
        return {}

    async def prepare(self, plan: Plan) -> Facts:
        """Before t0, with the plan known: warm up; facts for the result."""
        return {}

    async def reconfigure(self, spec: SpecT) -> bool:
        """Take a changed spec live (a sweep's next point); False: reload the backend."""
        return False

    async def point_facts(self) -> Facts:
        """Facts about the point just run (batches, stamps, HTTP counters, warnings)."""
        return {}

    @classmethod
    def combine_facts(cls, spec: SpecT, details: Facts, parts: list[Facts]) -> Facts:
        """Several worker processes' ``point_facts`` as one run's: numbers summed, warnings
        kept once each, anything else as the first worker said it."""
        return combine_parts(parts)

    def set_origin(self, t0_ns: int) -> None:
        """The run's t0, before the first request (a simulator keys its timeline to it)."""

    def window_started(self) -> None:
        """The measurement window opened (a backend's own accounting starts over)."""

    async def profile_start(self, options: Profile) -> str | None:
        """Turn the profiler on (``supports_profiling`` backends): None when it is on, else why
        it is not (the window then flags no request)."""
        return "this backend has no profiler"

    async def profile_stop(self, out_dir: str) -> Facts:
        """Close the profiler window; what it exported."""
        return {}
