"""Sweeps: one scenario at several settings, the model loaded once; curves, frontier, knee.

Every point is validated before the first one runs, then each runs the full warmup / measure /
drain protocol into its own run directory. A point that fails (CUDA OOM, a crashed engine) is
marked with its reason and the sweep goes on (``stop_at_oom`` ends it cleanly at the first OOM,
for ascending batch sizes where larger points cannot fit). ``find_max_rate`` brackets, then
bisects, the highest arrival rate whose run meets the SLA (verdict PASS), to a stated tolerance.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from loadtest.config.loading import load_scenario
from loadtest.core import atomic
from loadtest.core.errors import ScenarioError
from loadtest.session import Session

SCHEMA = "loadtest/sweep/v1"
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
    values = [yaml.safe_load(v) for v in text.split(",") if v.strip()]
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


def _overrides(point: dict) -> list[str]:
    return [
        f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
        for k, v in point.items()
    ]


@dataclass
class SweepResult:
    out_dir: Path
    doc: dict = field(default_factory=dict)


async def run_sweep(
    scenario_path: Path,
    base_overrides: list[str],
    axes: dict[str, list],
    out: Path,
    session: Session,
    stop_at_oom: bool = False,
) -> SweepResult:
    points = points_of(axes)
    loaded = [
        load_scenario(scenario_path, base_overrides + _overrides(p)) for p in points
    ]  # all valid first
    rows, status = [], "ok"
    for i, (params, ld) in enumerate(zip(points, loaded)):
        run_dir = out / f"point-{i:02d}"
        result = await session.run_point(ld, run_dir)
        row = point_row(params, result.metrics, run_dir.name)
        rows.append(row)
        _write(out, scenario_path, axes, rows, "running")
        if result.metrics["status"] == "interrupted":
            status = "interrupted"
            break
        if row["status"] == "oom" and stop_at_oom:
            status = "stopped_at_oom"
            break
    doc = _write(out, scenario_path, axes, rows, status)
    return SweepResult(out, doc)


def point_row(params: dict, metrics: dict, run_dir: str) -> dict:
    errors = (metrics.get("requests") or {}).get("errors_by_type") or {}
    if "CudaOOM" in errors:
        status, reason = "oom", f"CUDA out of memory in {errors['CudaOOM']} requests"
    elif metrics["status"] == "failed":
        status, reason = (
            "failed",
            "; ".join(metrics.get("validity", {}).get("reasons", []))
            or (metrics.get("harness") or {}).get("failure"),
        )
    else:
        status, reason = (
            metrics["status"],
            "; ".join(metrics.get("validity", {}).get("reasons", [])) or None,
        )
    return {
        "params": params,
        "status": status,
        "reason": reason,
        "run_dir": run_dir,
        "metrics": metrics,
    }


def _write(out: Path, scenario_path: Path, axes: dict, rows: list[dict], status: str) -> dict:
    doc = {
        "schema": SCHEMA,
        "status": status,
        "scenario_file": str(scenario_path),
        "axes": axes,
        "points": rows,
        **curves(rows, next(iter(axes))),
    }
    atomic.write_json(out / "sweep.json", doc)
    return doc


def headline(metrics: dict) -> dict:
    lat, tp = metrics.get("latency_ms") or {}, metrics.get("throughput") or {}
    g = lambda m, p: (lat.get(m) or {}).get(p)  # noqa: E731
    return {
        "output_tokens_per_s": tp.get("output_tokens_per_s"),
        "requests_per_s": tp.get("requests_per_s"),
        "ttft_p50_ms": g("ttft", "p50"),
        "ttft_p99_ms": g("ttft", "p99"),
        "itl_p50_ms": g("itl", "p50"),
        "itl_p99_ms": g("itl", "p99"),
        "e2e_p99_ms": g("e2e", "p99"),
    }


def curves(rows: list[dict], axis: str) -> dict:
    """The curve (one entry per point), the throughput-latency frontier, and the knee.

    Frontier: points no other point beats on both output tok/s (higher) and p99 E2E (lower).
    Knee: the point of highest power, throughput / p99 E2E (Kleinrock): past it, each extra
    token/s costs more latency than it buys.
    """
    first = axis.split(",")[0].strip()
    curve = [
        {"x": r["params"].get(first), "status": r["status"], **headline(r["metrics"])} for r in rows
    ]
    usable = [
        c
        for c in curve
        if c["status"] in ("ok", "invalid") and c["output_tokens_per_s"] and c["e2e_p99_ms"]
    ]
    frontier = [
        c["x"]
        for c in usable
        if not any(
            o["output_tokens_per_s"] >= c["output_tokens_per_s"]
            and o["e2e_p99_ms"] <= c["e2e_p99_ms"]
            and (o["output_tokens_per_s"], o["e2e_p99_ms"])
            != (c["output_tokens_per_s"], c["e2e_p99_ms"])
            for o in usable
        )
    ]
    knee = max(usable, key=lambda c: c["output_tokens_per_s"] / c["e2e_p99_ms"], default=None)
    return {
        "axis": axis,
        "curve": curve,
        "frontier": frontier,
        "knee": None if knee is None else knee["x"],
    }


# --- the highest rate that meets the SLA ---------------------------------------------------


async def find_max_rate(
    scenario_path: Path,
    base_overrides: list[str],
    out: Path,
    session: Session,
    tolerance: float = 0.05,
    max_points: int = 24,
) -> dict:
    base = load_scenario(scenario_path, base_overrides).scenario
    if base.sla is None:
        raise ScenarioError(
            [f"{scenario_path}: --find-max-rate needs an sla: block (what 'meets' means)"]
        )
    if not hasattr(base.load.arrival, "rate"):
        raise ScenarioError(
            [
                f"{scenario_path}: --find-max-rate needs an arrival with a rate (constant, poisson, gamma)"
            ]
        )
    tried: dict[float, dict] = {}

    async def meets(rate: float) -> bool:
        rate = round(rate, 6)
        if rate not in tried:
            ld = load_scenario(scenario_path, base_overrides + [f"load.arrival.rate={rate}"])
            result = await session.run_point(ld, out / f"rate-{len(tried):02d}")
            tried[rate] = point_row(
                {"load.arrival.rate": rate}, result.metrics, f"rate-{len(tried):02d}"
            )
        return (tried[rate]["metrics"].get("sla") or {}).get("verdict") == "PASS"

    good, bad, rate = None, None, base.load.arrival.rate
    while len(tried) < max_points and (good is None or bad is None):
        if await meets(rate):
            good, rate = rate, rate * 2
        else:
            bad, rate = rate, rate / 2
        if good is not None and bad is not None:
            break
    while (
        good is not None
        and bad is not None
        and (bad - good) / good > tolerance
        and len(tried) < max_points
    ):
        mid = (good + bad) / 2
        good, bad = (mid, bad) if await meets(mid) else (good, mid)
    rows = [tried[r] for r in sorted(tried)]
    doc = {
        "schema": SCHEMA,
        "status": "ok" if good is not None else "no_rate_meets_sla",
        "scenario_file": str(scenario_path),
        "axes": {"load.arrival.rate": sorted(tried)},
        "max_rate": {
            "rate": good,
            "first_failing_rate": bad,
            "tolerance": tolerance,
            "evidence": "the highest rate tried whose run met every SLA check (PASS), and the lowest "
            "that did not; the true limit lies between them",
        },
        "points": rows,
        **curves(rows, "load.arrival.rate"),
    }
    atomic.write_json(out / "sweep.json", doc)
    return doc
