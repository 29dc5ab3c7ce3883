"""``--find-max-rate``: bracket, then bisect, the highest arrival rate whose run meets the SLA
(verdict PASS), to a stated tolerance. A point without enough evidence for a verdict runs again
for longer, up to a cap; a search that cannot decide ends with a verdict that says why."""

from __future__ import annotations

import math
from pathlib import Path

from loadtest.config.loading import load_scenario
from loadtest.core.errors import ScenarioError
from loadtest.results.model import (
    MaxRate,
    RunMetrics,
    SweepDoc,
    SweepPoint,
    SweepStatus,
)
from loadtest.session import Session
from loadtest.sweep.grid import error_row, point_row, sweep_doc, write_doc

DEFAULT_MAX_POINT_S = 600.0  # --find-max-rate: the longest measured window one point may get

MEETS, ABOVE, LONGER = "meets", "above", "longer"  # what a search point says of its rate
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
    if metrics.stability is not None and metrics.stability.steady is False:
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
        final = write_doc(search.doc(), out)
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
                result = await self.session.run_point(
                    ld, self.out / run_dir, metrics_as=(self.out.name, f"rate={rate:g}")
                )
            except ScenarioError as exc:
                self.rows.append(error_row(params, run_dir, exc))
                self.end("error", f"at {rate:g} req/s: {'; '.join(exc.problems)}")
                return "error"
            self.rows.append(point_row(params, result.result, run_dir))
            write_doc(self.doc("running"), self.out)
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

    def doc(self, status: SweepStatus | None = None) -> SweepDoc:
        if status is None:
            endings: dict[str, SweepStatus] = {
                "found": "ok",
                "narrowed": "ok",
                "interrupted": "interrupted",
                "no_rate_meets_sla": "no_rate_meets_sla",
            }
            status = endings.get(self.ending, "no_verdict")
        rows = sorted(self.rows, key=_rate_of)
        evidence = (
            "the highest rate tried whose run met every SLA check (PASS), and the lowest that did "
            "not; the true limit lies between them"
        )
        if self.why:
            evidence = f"{ENDINGS.get(self.ending, self.ending)}: {self.why}"
        return sweep_doc(
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


def _rate_of(point: SweepPoint) -> float:
    """The arrival rate a point of the search ran at (always a number: the search sets it)."""
    rate = point.params["load.arrival.rate"]
    assert isinstance(rate, (int, float))
    return rate
