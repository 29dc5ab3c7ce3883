"""Sweeps: one scenario at several settings, the model loaded once; curves, frontier, knee.

Every point is validated before the first one runs, then each runs the full warmup / measure /
drain protocol into its own run directory. A point that fails (CUDA OOM, a crashed engine) is
marked with its reason and the sweep goes on (``stop_at_oom`` ends it cleanly at the first OOM,
for ascending batch sizes where larger points cannot fit). ``find_max_rate`` brackets, then
bisects, the highest arrival rate whose run meets the SLA (verdict PASS), to a stated tolerance.
A point without enough evidence for a verdict is run again for longer, up to a stated cap per
point; a search that cannot decide ends with a verdict that says why. sweep.json is written
after every point, and at the end whatever ended the sweep.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from loadtest.config.loading import load_scenario
from loadtest.core import atomic
from loadtest.core.errors import ScenarioError
from loadtest.results.model import (
    HEADLINE,
    CurvePoint,
    MaxRate,
    RunMetrics,
    SweepDoc,
    SweepPoint,
)
from loadtest.session import Session

DEFAULT_BATCHES_PER_POINT = 8  # offline batch-size sweeps: full batches measured per point
DEFAULT_MAX_POINT_S = 600.0  # --find-max-rate: the longest measured window one point may get
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


def _overrides(point: dict) -> list[str]:
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
            scenario_path, base_overrides + _overrides(p) + _sized(p, sizing, batches_per_point)
        )
        for p in points
    ]  # all valid first
    rows: list[SweepPoint] = []
    status = "ok"
    for i, (params, ld) in enumerate(zip(points, loaded)):
        run_dir = out / f"point-{i:02d}"
        started = time.monotonic()
        try:
            result = await session.run_point(ld, run_dir)
        except ScenarioError as exc:  # this point's plan is unusable; the others may be fine
            rows.append(_error_row(params, run_dir.name, exc))
            _write(_doc(scenario_path, axes, rows, "running", point_sizing=sizing), out)
            continue
        row = point_row(params, result.result, run_dir.name)
        rows.append(row)
        _write(_doc(scenario_path, axes, rows, "running", point_sizing=sizing), out)
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
    doc = _write(_doc(scenario_path, axes, rows, status, point_sizing=sizing), out)
    return SweepResult(out, doc)


def _overall(rows: list[SweepPoint]) -> str:
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


def _error_row(params: dict, run_dir: str, exc: ScenarioError) -> SweepPoint:
    return SweepPoint(
        params=params,
        status="error",
        reason="; ".join(exc.problems),
        run_dir=run_dir,
        metrics=None,
    )


def _doc(
    scenario_path: Path,
    axes: dict,
    rows: list[SweepPoint],
    status: str,
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
    )


def _write(doc: SweepDoc, out: Path) -> SweepDoc:
    atomic.write_json(out / "sweep.json", doc.view())
    return doc


def headline(metrics: RunMetrics | None) -> dict:
    """A point's headline figures under the curve's column names (``ttft_p99`` -> ``ttft_p99_ms``)."""
    if metrics is None:
        return {}
    return {
        (name if name.endswith("_per_s") else f"{name}_ms"): metrics.headline(name)
        for name in HEADLINE
        if name != "e2e_p50"
    }


def curves(rows: list[SweepPoint], axis: str) -> tuple[list[CurvePoint], list, object]:
    """The curve (one entry per point), the throughput-latency frontier, and the knee.

    Frontier: steady points no other steady point beats on both output tok/s (higher) and p99
    E2E (lower). Knee: the steady point of highest power, throughput / p99 E2E (Kleinrock): past
    it, each extra token/s costs more latency than it buys.
    """
    first = axis.split(",")[0].strip()
    curve = [
        CurvePoint(
            x=r.params.get(first),
            status=r.status,
            steady=None
            if r.metrics is None or r.metrics.stability is None
            else r.metrics.stability.steady,
            goodput_rps=None
            if r.metrics is None or r.metrics.goodput is None
            else r.metrics.goodput.good_requests_per_s,
            **headline(r.metrics),
        )
        for r in rows
    ]
    # (x, output tok/s, p99 E2E) of the steady points with both figures: an overloaded point's
    # p99 grows with the run's length, so it belongs on no frontier
    usable = [
        (c.x, c.output_tokens_per_s, c.e2e_p99_ms)
        for c in curve
        if c.status in ("ok", "invalid")
        and c.steady is not False
        and c.output_tokens_per_s
        and c.e2e_p99_ms
    ]
    frontier = [
        x
        for x, tput, p99 in usable
        if not any(t >= tput and p <= p99 and (t, p) != (tput, p99) for _, t, p in usable)
    ]
    knee = max(usable, key=lambda u: u[1] / u[2], default=None)
    return curve, frontier, None if knee is None else knee[0]


def knee_caveats(curve: list[CurvePoint], knee) -> list[str]:
    """What a reader must know before trusting the knee: it sits at an end of the range, rests on
    invalid or few points, or there is none."""
    usable = [
        c
        for c in curve
        if c.status in ("ok", "invalid") and c.steady is not False and c.output_tokens_per_s
    ]
    if knee is None:
        return ["no knee: no steady point with throughput and p99 E2E"]
    out = []
    xs = [c.x for c in curve]
    if knee == xs[-1]:
        out.append("the knee is the range's last point: the curve may go on rising past it")
    elif knee == xs[0]:
        out.append("the knee is the range's first point: the best trade-off may lie below it")
    invalid = [c.x for c in usable if c.status == "invalid"]
    if invalid:
        out.append(f"invalid points are on the curve (each point's reason says why): {invalid}")
    unsteady = [c.x for c in curve if c.steady is False]
    if unsteady:
        out.append(f"overloaded points are left out of the knee and frontier: {unsteady}")
    if len(usable) < 3:
        out.append(f"only {len(usable)} usable point(s): too few to locate a knee")
    return out


# --- the highest rate that meets the SLA ---------------------------------------------------

MEETS, ABOVE, LONGER = "meets", "above", "longer"
# How a search ends (``max_rate.verdict``): only "found" and "narrowed" report a bracket whose
# both ends were decided by evidence.
ENDINGS = {
    "found": "the bracket is within the tolerance",
    "narrowed": "a rate inside the bracket could not be decided within the point cap",
    "no_rate_meets_sla": "no rate tried met the SLA",
    "inconclusive": "a point had too few samples for a verdict even at the point cap",
    "harness_limit": "the client could not offer the rate (run invalid)",
    "error": "a point's scenario could not run",
    "point_budget": "the run budget (max_points) was spent first",
    "interrupted": "interrupted by a signal",
}


def judge_point(
    metrics: RunMetrics, at_cap: bool, min_goodput: float | None = None
) -> tuple[str, str]:
    """What one search point says about its rate: MEETS the objectives (the SLA, and a goodput
    attainment of at least ``min_goodput``), ABOVE the limit, LONGER (more samples would decide
    it), or an ending of the search. The second value says why."""
    sla = metrics.sla
    if metrics.status == "interrupted":
        return "interrupted", f"interrupted by {metrics.interrupted_by or 'a signal'}"
    if metrics.status == "failed":  # the system under test stopped answering at this rate
        return ABOVE, "; ".join(metrics.validity.reasons) or "the run failed"
    if metrics.stability is not None and not metrics.stability.steady:
        return ABOVE, "overloaded: " + "; ".join(metrics.stability.reasons)
    if min_goodput is not None:
        g = metrics.goodput
        if g is None or g.attainment is None:
            return "error", "no goodput measured (the scenario needs a goodput: block)"
        if g.attainment < min_goodput:
            return ABOVE, f"goodput attainment {g.attainment:.1%} < {min_goodput:.1%}"
        if sla is None:
            return MEETS, f"goodput attainment {g.attainment:.1%} >= {min_goodput:.1%}"
    if sla is None:
        return "error", "no SLA verdict"
    if sla.verdict == "PASS":
        return MEETS, "every SLA check passed"
    if sla.verdict == "FAIL":
        return ABOVE, "SLA failed: " + ", ".join(c.name for c in sla.checks if c.verdict == "FAIL")
    if metrics.status == "invalid":
        return "harness_limit", "the run is invalid: " + "; ".join(metrics.validity.reasons)
    short = "; ".join(f"{c.name}: {c.reason}" for c in sla.checks if c.verdict == "INCONCLUSIVE")
    if at_cap:
        return "inconclusive", f"too few samples at the point cap (--max-point-duration): {short}"
    return LONGER, short


def lengthen(metrics: RunMetrics) -> float:
    """By how much the window should grow to hold the samples the inconclusive checks need
    (+25% so noise does not leave it one short), at least 2x."""
    factor = 2.0
    for c in metrics.sla.checks if metrics.sla else []:
        if c.verdict == "INCONCLUSIVE" and c.samples_needed and c.samples:
            factor = max(factor, 1.25 * c.samples_needed / c.samples)
    return factor


async def find_max_rate(
    scenario_path: Path,
    base_overrides: list[str],
    out: Path,
    session: Session,
    tolerance: float = 0.05,
    max_points: int = 24,
    max_point_s: float = DEFAULT_MAX_POINT_S,
    min_goodput: float | None = None,
) -> SweepDoc:
    """Bracket, then bisect, the highest rate whose run meets the SLA.

    A point whose SLA checks are INCONCLUSIVE for want of samples is run again with a longer
    window (``load.duration``, or ``load.requests`` for a count window), up to ``max_point_s``
    of measured time (never shorter than the scenario's own window); ``max_points`` bounds all
    runs. Every run is a point in sweep.json, which is rewritten after each one.
    """
    base = load_scenario(scenario_path, base_overrides).scenario
    if base.sla is None and min_goodput is None:
        raise ScenarioError(
            [
                f"{scenario_path}: --find-max-rate needs an sla: block or --min-goodput "
                "(what 'meets' means)"
            ]
        )
    if min_goodput is not None and base.goodput is None:
        raise ScenarioError(
            [f"{scenario_path}: --min-goodput needs a goodput: block (the per-request objectives)"]
        )
    if base.load.arrival.kind not in ("constant", "poisson", "gamma"):
        raise ScenarioError(
            [
                f"{scenario_path}: --find-max-rate needs an arrival with a rate (constant, poisson, gamma)"
            ]
        )
    search = _Search(
        scenario_path, base_overrides, out, session, max_points, max_point_s, tolerance
    )
    search.min_goodput = min_goodput
    search.by_count = base.load.duration is None
    load = base.load
    search.first_size = float(load.requests or 0) if search.by_count else (load.duration or 0) / 1e9
    try:
        await search.run(base.load.arrival.rate)
    finally:
        final = _write(search.doc(), out)
    return final


class _Search:
    def __init__(
        self,
        path: Path,
        overrides: list[str],
        out: Path,
        session: Session,
        max_points: int,
        max_point_s: float,
        tolerance: float,
    ) -> None:
        self.path, self.overrides, self.out, self.session = path, overrides, out, session
        self.max_points, self.max_point_s, self.tolerance = max_points, max_point_s, tolerance
        self.by_count, self.first_size = False, 0.0
        self.min_goodput: float | None = None
        self.rows: list[SweepPoint] = []
        self.good: float | None = None  # highest rate that met the SLA
        self.bad: float | None = None  # lowest rate that did not
        self.ending, self.why = "interrupted", ""  # until run() says otherwise

    async def run(self, rate: float) -> None:
        """Bracket (double from a pass, halve from a fail), then bisect; ``judge`` moves the
        bracket's ends."""
        while self.good is None or self.bad is None:
            word = await self.judge(rate)
            if word == MEETS:
                rate *= 2
            elif word == ABOVE:
                rate /= 2
            else:
                return
        while (self.bad - self.good) / self.good > self.tolerance:
            if await self.judge((self.good + self.bad) / 2) not in (MEETS, ABOVE):
                return
        self.end("found", "")

    def end(self, ending: str, why: str) -> None:
        self.ending, self.why = ending, why

    async def judge(self, rate: float) -> str:
        """MEETS or ABOVE for ``rate`` (moving the bracket), lengthening its window as its
        evidence needs; anything else ends the search (``ending`` says why)."""
        rate = round(rate, 6)
        size = self.first_size
        while True:
            if len(self.rows) >= self.max_points:
                ending = "no_rate_meets_sla" if self.good is None and self.bad else "point_budget"
                self.end(ending, f"{self.max_points} runs used")
                return ending
            window_s = size / rate if self.by_count else size
            cap_s = max(
                self.max_point_s, self.first_size / rate if self.by_count else self.first_size
            )
            window = (
                f"load.requests={math.ceil(size)}" if self.by_count else f"load.duration={size:g}s"
            )
            run_dir = f"rate-{len(self.rows):02d}"
            params = {"load.arrival.rate": rate, "window_s": round(window_s, 3)}
            try:
                ld = load_scenario(
                    self.path, self.overrides + [f"load.arrival.rate={rate}", window]
                )
                result = await self.session.run_point(ld, self.out / run_dir)
            except ScenarioError as exc:
                self.rows.append(_error_row(params, run_dir, exc))
                self.end("error", f"at {rate:g} req/s: {'; '.join(exc.problems)}")
                return "error"
            self.rows.append(point_row(params, result.result, run_dir))
            _write(self.doc("running"), self.out)
            word, why = judge_point(result.result, window_s >= cap_s, self.min_goodput)
            if word == MEETS:
                self.good = rate if self.good is None else max(self.good, rate)
                return word
            if word == ABOVE:
                self.bad = rate if self.bad is None else min(self.bad, rate)
                return word
            if word == LONGER:
                grown = size * lengthen(result.result)
                cap = cap_s * rate if self.by_count else cap_s
                size = min(math.ceil(grown), cap) if not self.by_count else min(grown, cap)
                continue
            inside = self.good is not None and self.bad is not None and self.good < rate < self.bad
            if word == "inconclusive" and inside:
                self.end("narrowed", f"at {rate:g} req/s: {why}")
            else:
                self.end(word, f"at {rate:g} req/s: {why}")
            return word

    def doc(self, status: str | None = None) -> SweepDoc:
        if status is None:
            status = {
                "found": "ok",
                "narrowed": "ok",
                "interrupted": "interrupted",
                "no_rate_meets_sla": "no_rate_meets_sla",
            }.get(self.ending, "no_verdict")
        rows = sorted(self.rows, key=lambda r: r.params["load.arrival.rate"])
        evidence = (
            "the highest rate tried whose run met every SLA check (PASS), and the lowest that did "
            "not; the true limit lies between them"
        )
        if self.why:
            evidence = f"{ENDINGS.get(self.ending, self.ending)}: {self.why}"
        return _doc(
            self.path,
            {"load.arrival.rate": sorted({r.params["load.arrival.rate"] for r in rows})},
            rows,
            status,
            MaxRate(
                rate=self.good,
                first_failing_rate=self.bad,
                tolerance=self.tolerance,
                verdict=self.ending if status != "running" else "searching",
                evidence=evidence,
            ),
        )
