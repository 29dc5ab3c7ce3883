"""A sweep over a grid of settings: the axes from the command line, one run a point with the
model loaded once, a point that fails marked with its reason (``stop_at_oom`` ends the sweep at
the first OOM), and sweep.json written after every point."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from loadtest.config.loading import load_scenario
from loadtest.core import atomic
from loadtest.core.errors import ScenarioError
from loadtest.results.model import (
    MaxRate,
    RunMetrics,
    SweepDoc,
    SweepPoint,
    SweepStatus,
)
from loadtest.session import Session
from loadtest.sweep.curve import cheapest, curves, knee_caveats

DEFAULT_BATCHES_PER_POINT = 8  # offline batch-size sweeps: full batches measured per point


AXES = {
    "batch_sizes": "backend.max_batch_size",
    "rates": "load.arrival.rate",
    "concurrency": "load.arrival.users",
}


def parse_axes(
    batch_sizes: str | None, rates: str | None, concurrency: str | None, params: list[str]
) -> dict[str, list]:
    """``{"backend.max_batch_size": [1, 2, 4], ...}`` from the CLI's comma lists."""
    axes: dict[str, list] = {}
    for name, text in (
        ("batch_sizes", batch_sizes),
        ("rates", rates),
        ("concurrency", concurrency),
    ):
        if text:
            axes[AXES[name]] = _values(text, f"--{name.replace('_', '-')}")
    for item in params:
        if "=" not in item:
            raise ScenarioError([f"--param {item}: expected dotted.key=v1,v2,..."])
        key, text = item.split("=", 1)
        axes[key.strip()] = _values(text, f"--param {key}")
    return axes


def _values(text: str, flag: str) -> list:
    try:
        values = [yaml.safe_load(v) for v in text.split(",") if v.strip()]
    except yaml.YAMLError as exc:
        raise ScenarioError([f"{flag}={text}: not a list of values ({exc.problem})"]) from None
    if not values:
        raise ScenarioError([f"{flag}: no values"])
    return values


def points_of(axes: dict[str, list]) -> list[dict]:
    """The grid of points. A key ``a,b`` is a tied axis: both fields take each value together."""
    keys = list(axes)
    points = []
    for combo in itertools.product(*(axes[k] for k in keys)):
        point = {}
        for key, value in zip(keys, combo):
            for field_name in key.split(","):
                point[field_name.strip()] = value
        points.append(point)
    return points


def overrides_of(point: dict) -> list[str]:
    return [
        f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
        for k, v in point.items()
    ]


@dataclass
class SweepResult:
    """Where a sweep was written, and its document."""

    out_dir: Path
    doc: SweepDoc


async def run_sweep(
    scenario_path: Path,
    base_overrides: list[str],
    axes: dict[str, list],
    out: Path,
    session: Session,
    stop_at_oom: bool = False,
    batches_per_point: int | None = DEFAULT_BATCHES_PER_POINT,
    on_point: Callable[[int, int, float, SweepPoint], None] | None = None,
) -> SweepResult:
    """Every point of the grid on one session (all validated first), sweep.json after each.

    An offline sweep over batch sizes (a burst arrival, ``backend.max_batch_size`` on an axis)
    sizes each point by work, not by the scenario's fixed count: ``batches_per_point`` full
    batches measured after one full batch of warm-up, so batch 1 does not run for as long as
    batch 64 takes requests. ``on_point(k, n, seconds, row)`` is told as each point ends.
    """
    points = points_of(axes)
    base = load_scenario(scenario_path, base_overrides).scenario
    sizing = None
    if batches_per_point and base.load.arrival.kind == "burst":
        if any("backend.max_batch_size" in p for p in points):
            sizing = (
                f"offline points sized by work: {batches_per_point} full batches measured "
                "(load.requests = batches x backend.max_batch_size) after one full batch of "
                "warm-up (load.warmup_requests = backend.max_batch_size)"
            )
    loaded = [
        load_scenario(
            scenario_path, base_overrides + overrides_of(p) + _sized(p, sizing, batches_per_point)
        )
        for p in points
    ]  # all valid first
    rows: list[SweepPoint] = []
    status: SweepStatus = "ok"
    for i, (params, ld) in enumerate(zip(points, loaded)):
        run_dir = out / f"point-{i:02d}"
        started = time.monotonic()
        try:
            point = ",".join(f"{k}={v}" for k, v in params.items())
            result = await session.run_point(ld, run_dir, metrics_as=(out.name, point))
        except ScenarioError as exc:  # this point's plan is unusable; the others may be fine
            rows.append(error_row(params, run_dir.name, exc))
            write_doc(sweep_doc(scenario_path, axes, rows, "running", point_sizing=sizing), out)
            continue
        row = point_row(params, result.result, run_dir.name)
        rows.append(row)
        write_doc(sweep_doc(scenario_path, axes, rows, "running", point_sizing=sizing), out)
        if on_point is not None:
            on_point(i + 1, len(points), time.monotonic() - started, row)
        if result.status == "interrupted":
            status = "interrupted"
            break
        if row.status == "oom" and stop_at_oom:
            status = "stopped_at_oom"
            break
    if status == "ok":
        status = _overall(rows)
    doc = write_doc(sweep_doc(scenario_path, axes, rows, status, point_sizing=sizing), out)
    return SweepResult(out, doc)


def _overall(rows: list[SweepPoint]) -> SweepStatus:
    """A finished sweep's status from its points: ``ok`` only when every point is; ``partial``
    when some are not; ``invalid`` when none is (its curve describes nothing trustworthy)."""
    ok = sum(r.status == "ok" for r in rows)
    return "ok" if ok == len(rows) else ("partial" if ok else "invalid")


def _sized(point: dict, sizing: str | None, batches: int | None) -> list[str]:
    """The request-count overrides of an offline point sized by work (none otherwise)."""
    if sizing is None or not batches:
        return []
    bs = int(point["backend.max_batch_size"])
    return [f"load.requests={batches * bs}", f"load.warmup_requests={bs}"]


def point_row(params: dict, metrics: RunMetrics, run_dir: str) -> SweepPoint:
    """A sweep point from its run: ``oom`` when CUDA ran out of memory, else the run's status."""
    errors = metrics.requests.errors_by_type
    reasons = "; ".join(metrics.validity.reasons) or None
    reason: str | None
    if "CudaOOM" in errors:
        status, reason = "oom", f"CUDA out of memory in {errors['CudaOOM']} requests"
    elif metrics.status == "failed":
        status = "failed"
        reason = reasons or (metrics.harness.failure if metrics.harness else None)
    else:
        status, reason = metrics.status, reasons
    return SweepPoint(params=params, status=status, reason=reason, run_dir=run_dir, metrics=metrics)


def error_row(params: dict, run_dir: str, exc: ScenarioError) -> SweepPoint:
    return SweepPoint(
        params=params,
        status="error",
        reason="; ".join(exc.problems),
        run_dir=run_dir,
        metrics=None,
    )


def sweep_doc(
    scenario_path: Path,
    axes: dict,
    rows: list[SweepPoint],
    status: SweepStatus,
    max_rate: MaxRate | None = None,
    point_sizing: str | None = None,
) -> SweepDoc:
    axis = next(iter(axes))
    curve, frontier, knee = curves(rows, axis)
    return SweepDoc(
        knee_caveats=knee_caveats(curve, knee),
        status=status,
        scenario_file=str(scenario_path),
        axes=axes,
        points=rows,
        axis=axis,
        curve=curve,
        frontier=frontier,
        knee=knee,
        max_rate=max_rate,
        point_sizing=point_sizing,
        cheapest=cheapest(curve),
    )


def write_doc(doc: SweepDoc, out: Path) -> SweepDoc:
    atomic.write_json(out / "sweep.json", doc.view())
    return doc
