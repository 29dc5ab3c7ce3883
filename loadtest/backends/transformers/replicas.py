"""Several engines behind one queue: data-parallel replicas of a model, one per GPU (or per
tensor-parallel group of GPUs).

Each replica is a ``TransformersBackend`` of its own (its engine process, or group of them): it
batches, stamps and keeps its roofline accounting alone. The router sends each request to the
replica with the fewest outstanding requests, ties taken in turn (an idle pair of replicas
shares the load rather than one taking all of it), the policy of an inference server's load
balancer, and the result says so. The replicas load in
parallel; if one fails to load, or dies during the run, the run ends with everything measured
(its error names the replica).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator
from dataclasses import asdict

from loadtest.backends.base import Backend, BackendContext, BackendInfo, Facts, combine_parts
from loadtest.backends.transformers.backend import TransformersBackend
from loadtest.backends.transformers.compiling import batching_details
from loadtest.config.observing import Profile
from loadtest.config.transformers_spec import TransformersSpec
from loadtest.core.clock import Clock
from loadtest.core.errors import BackendError
from loadtest.core.events import BackendEvent, Cancelled
from loadtest.core.json_types import number_in
from loadtest.core.step_accounting import StepAccounting
from loadtest.workload.plan import Plan
from loadtest.workload.requests import PlannedRequest

ROUTING = "least outstanding requests (ties in turn)"


class ReplicaRouter(Backend[TransformersSpec]):
    """Data-parallel replicas behind one queue, least outstanding first."""

    needs_prompt_ids = True
    supports_profiling = True  # replica 0's engine

    @classmethod
    def create(
        cls, spec: TransformersSpec, clock: Clock, context: BackendContext | None = None
    ) -> Backend[TransformersSpec]:
        """``kind: transformers``: one engine, or replicas of it behind this router when the
        spec lays the model out on several groups of devices."""
        groups = spec.device_groups()
        processes = sum(len(g) for g in groups)
        if len(groups) == 1:
            return TransformersBackend(spec, clock, context, groups[0], processes)
        return cls(spec, clock, context, groups)

    @classmethod
    def combine_facts(cls, spec: TransformersSpec, details: Facts, parts: list[Facts]) -> Facts:
        return TransformersBackend.combine_facts(spec, details, parts)

    def __init__(
        self,
        spec: TransformersSpec,
        clock: Clock,
        context: BackendContext | None,
        groups: list[tuple[str, ...]],
    ) -> None:
        super().__init__(spec, clock, context)
        processes = sum(len(g) for g in groups)
        self.replicas = [
            TransformersBackend(
                spec, clock, context, group, processes, f"-replica{i}", i * len(groups[0])
            )
            for i, group in enumerate(groups)
        ]
        self.outstanding = [0] * len(groups)
        self._turn = 0  # where the search for the least loaded starts: ties go in turn
        self.routed = [0] * len(groups)  # requests sent to each since the last point_facts
        self._details: dict = {}  # the result's backend facts, from start

    @property
    def engine_hooks(self) -> tuple[str, ...]:
        return TransformersBackend.engine_hooks

    async def start(self) -> BackendInfo:
        started = await asyncio.gather(*(r.start() for r in self.replicas), return_exceptions=True)
        failed = [(i, x) for i, x in enumerate(started) if isinstance(x, BaseException)]
        if failed:
            await self.stop()
            i, exc = failed[0]
            if not isinstance(exc, Exception):
                raise exc
            raise BackendError(f"replica {i} ({self._where(i)}): {exc}")
        infos: list[BackendInfo] = list(started)  # type: ignore[arg-type]
        first = infos[0]
        self.tokenizer = first.tokenizer
        details = self._details = dict(first.details)
        details["routing"] = ROUTING
        details["replicas"] = [
            {
                "index": i,
                "devices": list(r.group),
                "device_name": info.details.get("device_name"),
                "cpus": info.details.get("cpus"),
                "torch_threads": info.details.get("torch_threads"),
                "load_s": info.details.get("load_s"),
            }
            for i, (r, info) in enumerate(zip(self.replicas, infos))
        ]
        n, tp = len(self.replicas), len(self.replicas[0].group)
        layout = f"{n} replicas" + (f" of TP{tp}" if tp > 1 else "")
        name = f"transformers:{self.spec.model} ({self.spec.mode}, {layout}, {details['dtype']})"
        return BackendInfo(name, first.tokenizer, details, first.notices)

    async def prepare(self, plan: Plan) -> Facts:
        warmed = await asyncio.gather(*(r.prepare(plan) for r in self.replicas))
        # the slowest replica's warm-up (with its compile and gc shares) is the run's
        return max(warmed, key=lambda w: number_in(w, "warmup_s"))

    async def submit(
        self, req: PlannedRequest, prompt_ids: list[int] | None
    ) -> AsyncGenerator[BackendEvent | Cancelled, None]:
        i = self.choose()
        self.outstanding[i] += 1
        self.routed[i] += 1
        try:
            async for ev in self.replicas[i].submit(req, prompt_ids):
                yield ev
        except BackendError as exc:
            raise BackendError(f"replica {i} ({self._where(i)}): {exc}") from None
        finally:
            self.outstanding[i] -= 1

    def choose(self) -> int:
        """The replica with the fewest outstanding requests; of several, the next in turn."""
        n = len(self.outstanding)
        order = [(self._turn + k) % n for k in range(n)]
        i = min(order, key=self.outstanding.__getitem__)  # the first of the least, in turn
        self._turn = (i + 1) % n
        return i

    async def reconfigure(self, spec: TransformersSpec) -> bool:
        done = await asyncio.gather(*(r.reconfigure(spec) for r in self.replicas))
        if all(done):
            self.spec = spec
            self._details.update(batching_details(spec, self._details["pad_decode"]))
        return all(done)

    def window_started(self) -> None:
        for r in self.replicas:
            r.window_started()

    async def profile_start(self, options: Profile) -> str | None:
        return await self.replicas[0].profile_start(options)

    async def profile_stop(self, out_dir: str) -> Facts:
        return {**await self.replicas[0].profile_stop(out_dir), "profiled": "replica 0"}

    async def call_in_engine(self, target: str, *args: object, timeout_s: float = 600.0) -> object:
        return await self.replicas[0].call_in_engine(target, *args, timeout_s=timeout_s)

    async def point_facts(self) -> Facts:
        parts = await asyncio.gather(*(r.point_facts() for r in self.replicas))
        facts = merge_facts(list(parts))
        facts["replicas"] = [
            {"index": i, "devices": list(r.group), "cpus": r.cpus, "requests": n, **_own(part)}
            for i, (r, n, part) in enumerate(zip(self.replicas, self.routed, parts))
        ]
        self.routed = [0] * len(self.replicas)
        return facts

    async def stop(self) -> Facts:
        # every replica is stopped whatever another's stop does; then a failed one is told
        stopped = await asyncio.gather(*(r.stop() for r in self.replicas), return_exceptions=True)
        for outcome in stopped:
            if isinstance(outcome, BaseException):
                raise outcome
        return merge_facts([s for s in stopped if isinstance(s, dict)])

    def _where(self, i: int) -> str:
        return ",".join(self.replicas[i].group)


def merge_facts(parts: list[Facts]) -> Facts:
    """The replicas' facts as one engine's: counts and step accounting summed (so MBU is the
    time-weighted mean over the replicas' GPUs), peak memory the largest."""
    if not parts:
        return {}
    out = combine_parts([{k: v for k, v in p.items() if not k.startswith("peak_")} for p in parts])
    accounts = [
        StepAccounting.from_json(p["roofline_acct"]) for p in parts if p.get("roofline_acct")
    ]
    if accounts:
        out["roofline_acct"] = asdict(functools.reduce(StepAccounting.plus, accounts))
    for key in ("peak_mem_mb", "peak_rss_mb"):
        peaks = [number_in(p, key) for p in parts if p.get(key) is not None]
        if peaks:
            out[key] = max(peaks)
    return out


def _own(part: Facts) -> Facts:
    """What the result lists for one replica."""
    keep = (
        "batches",
        "peak_mem_mb",
        "peak_rss_mb",
        "recompiles_in_window",
        "cudagraph_skips",
        "stamp_mismatches",
    )
    out: Facts = {k: part[k] for k in keep if k in part}
    step_ms = StepAccounting.from_json(part.get("roofline_acct") or {}).decode_step_ms
    if step_ms is not None:
        out["decode_step_ms"] = step_ms
    return out
