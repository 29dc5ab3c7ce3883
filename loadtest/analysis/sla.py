"""SLA checks -> a three-valued verdict with reasons: PASS, FAIL or INCONCLUSIVE.

A percentile bound ``metric_pX <= B`` is judged on the saved histograms, with the client's own
measured share of each figure kept apart (``ClientShare``). The client's lateness can only make
a latency from the intended send look worse: a late send, a stamp taken late by a busy loop. So
the server's true figure lies between the figure with the client's share taken off (the
service-time twin, less the stamp delay) and the observed one:

- PASS when the observed figure passes, with evidence: MLPerf's early-stopping rule, i.e. with
  ``k`` of ``n`` samples over B, the chance of seeing at most ``k`` misses if the true tail
  fraction were ``1 - X/100`` must be at most ``1 - confidence``. With no misses at 99%
  confidence a p99 bound needs 459 samples; fewer is INCONCLUSIVE, never PASS;
- FAIL when the figure still fails with the client's share taken off;
- INCONCLUSIVE in between, and for too few samples, each with its cause and reason.

ITL and TPOT are differences of two stamps, so a late stamp can move them either way: their
interval is the observed figure plus or minus the stamp delay. Error-rate bounds use the same
evidence rule, with the client's own failures (it ran out of file descriptors) kept apart; a
throughput floor counts the window the client's lateness cost.
"""

from __future__ import annotations

from dataclasses import replace

from loadtest.analysis.early_stopping import binom_cdf, enough, samples_needed
from loadtest.analysis.figure_ends import ends
from loadtest.analysis.verdicts import FAIL, INCONCLUSIVE, PASS, decide, overall
from loadtest.config.objectives import Sla
from loadtest.core.histogram import LatencyHistogram
from loadtest.core.proportion import wilson
from loadtest.core.units import figure
from loadtest.results.model import Check, Verdict
from loadtest.results.model.judged import Undecided
from loadtest.results.runset import ClientShare, Evidence

__all__ = [
    "FAIL",
    "INCONCLUSIVE",
    "PASS",
    "binom_cdf",
    "decide",
    "enough",
    "evaluate",
    "overall",
    "samples_needed",
]


def _check(
    name: str,
    verdict: str,
    observed: float | None,
    bound: float,
    op: str,
    unit: str,
    reason: str,
    samples: int | None = None,
    needed: int | None = None,
    client_free: float | None = None,
    undecided: Undecided | None = None,
) -> Check:
    could_change = (
        client_free is not None
        and observed is not None
        and ((observed <= bound) != (client_free <= bound) if op == "<=" else False)
    )
    return Check(
        name=name,
        verdict=verdict,
        observed=observed,
        bound=bound,
        op=op,
        unit=unit,
        reason=reason,
        samples=samples,
        samples_needed=needed,
        client_free=client_free,
        client_could_change=could_change or undecided == "client",
        undecided=undecided if verdict == INCONCLUSIVE else None,
    )


def percentile_check(
    name: str,
    hist: LatencyHistogram,
    pct: float,
    bound_ms: float,
    confidence: float,
    hists: dict[str, LatencyHistogram] | None = None,
    share: ClientShare | None = None,
    metric: str | None = None,
) -> Check:
    """``pct`` of ``hist`` at most ``bound_ms``: PASS when the observed figure passes with
    evidence; FAIL when it fails with the client's share taken off; else INCONCLUSIVE."""
    n = hist.count
    if n == 0:
        return _check(
            name,
            INCONCLUSIVE,
            None,
            bound_ms,
            "<=",
            "ms",
            "no samples",
            0,
            undecided="not_measured",
        )
    metric = metric or name
    e = ends(metric, pct, {**(hists or {}), metric: hist}, share or ClientShare())
    tail, p = 1 - pct / 100, f"p{pct:g}"
    said = f"observed {figure(e.hi, 'ms')}, limit {figure(bound_ms, 'ms')}"
    free = f"{figure(e.lo, 'ms')} with the client's own lateness taken off"

    def judged(
        verdict: str, reason: str, needed: int | None = None, why: Undecided | None = None
    ) -> Check:
        return _check(name, verdict, e.hi, bound_ms, "<=", "ms", f"{said}: {reason}", n,
                      needed, e.lo, why)  # fmt: skip

    over_free = e.lower.count_above_us(int((bound_ms + e.lower_shift_ms) * 1000))
    if e.lo > bound_ms:
        return judged(FAIL, f"over the limit, and {free} ({over_free} of {n} samples over)")
    if e.hi > bound_ms:
        return judged(
            INCONCLUSIVE,
            f"over the limit as observed, under it at {free}: the client's lateness spans the "
            "limit (give the client more room: a core of its own, more workers)",
            why="client",
        )
    misses = hist.count_above_us(int((bound_ms - e.up_shift_ms) * 1000))
    if enough(misses, n, tail, confidence):
        return judged(
            PASS, f"{misses} of {n} samples over, so {p} <= limit at {confidence:.0%} confidence"
        )
    need = samples_needed(misses, tail, confidence)
    if enough(over_free, n, tail, confidence):
        return judged(
            INCONCLUSIVE,
            f"{misses} of {n} samples over as observed, {over_free} with the client's own "
            f"lateness taken off: the client's lateness decides whether {n} samples are enough "
            f"for {confidence:.0%} confidence",
            need,
            "client",
        )
    return judged(
        INCONCLUSIVE,
        f"within it, but {n} samples with {misses} over are too few to claim {p} at "
        f"{confidence:.0%} confidence (needs >= {need} samples)",
        need,
        "samples",
    )


def error_rate_check(
    failed: int, finished: int, bound: float, confidence: float, client_failed: int = 0
) -> Check:
    """Failed / finished at most ``bound``, with the same evidence rule; the client's own
    failures are the server's only at the observed end."""
    if finished == 0:
        return _check(
            "error_rate",
            INCONCLUSIVE,
            None,
            bound,
            "<=",
            "",
            "no finished requests",
            0,
            undecided="not_measured",
        )
    rate = failed / finished
    server = finished - client_failed
    free = (failed - client_failed) / server if server else 0.0
    said = f"{failed} of {finished} requests failed"
    if client_failed:
        said += f" ({client_failed} of them the client's own)"
    if free > bound:
        return _check("error_rate", FAIL, rate, bound, "<=", "", said, finished, client_free=free)
    if rate > bound:
        return _check(
            "error_rate",
            INCONCLUSIVE,
            rate,
            bound,
            "<=",
            "",
            f"{said}: over {bound:g} only with the client's own failures counted",
            finished,
            client_free=free,
            undecided="client",
        )
    if (bound == 0 and failed == 0) or enough(failed, finished, bound, confidence):
        return _check("error_rate", PASS, rate, bound, "<=", "", said, finished, client_free=free)
    need = samples_needed(failed, bound, confidence)
    return _check(
        "error_rate",
        INCONCLUSIVE,
        rate,
        bound,
        "<=",
        "",
        f"{said}: too few requests to claim a rate <= {bound:g} at {confidence:.0%} confidence "
        f"(needs >= {need})",
        finished,
        need,
        client_free=free,
        undecided="samples",
    )


def answers_check(counts: tuple[int, int] | None, bound: float, confidence: float) -> Check:
    """The share of answers under load that matched their reference at least ``bound``, on its
    Wilson interval: PASS when the interval's lower end clears it, FAIL when its upper end
    misses it, else too few compared to tell."""
    name = "answers_match"
    if counts is None or counts[0] == 0:
        said = "no answer was compared" if counts else "answers: not checked in this run"
        return _check(name, INCONCLUSIVE, None, bound, ">=", "", said, 0, undecided="not_measured")
    compared, matched = counts
    lo, hi = wilson(matched, compared, confidence)
    rate = matched / compared
    said = (
        f"{matched} of {compared} answers matched their reference ({rate:.1%}; "
        f"{lo:.1%}..{hi:.1%} at {confidence:.0%} confidence), floor {bound:.1%}"
    )
    if lo >= bound:
        return _check(name, PASS, rate, bound, ">=", "", said, compared)
    if hi < bound:
        return _check(name, FAIL, rate, bound, ">=", "", said, compared)
    return _check(
        name,
        INCONCLUSIVE,
        rate,
        bound,
        ">=",
        "",
        f"{said}: too few compared to tell",
        compared,
        undecided="samples",
    )


def floor_check(
    name: str, observed: float | None, bound: float, unit: str, lost_share: float = 0.0
) -> Check:
    """A throughput at least ``bound`` (a rate is measured, not sampled: no evidence rule).
    ``lost_share``: the window's share the client's latest send cost (the schedule ran that
    much late), so the server's own rate may be up to ``observed / (1 - lost_share)``."""
    if observed is None:
        return _check(
            name,
            INCONCLUSIVE,
            None,
            bound,
            ">=",
            unit,
            "not measured (no window)",
            undecided="not_measured",
        )
    free = observed / max(1e-9, 1 - min(lost_share, 0.999))
    said = f"observed {figure(observed, unit)}, floor {figure(bound, unit)}"
    if observed >= bound:
        return _check(name, PASS, observed, bound, ">=", unit, said, client_free=free)
    if free >= bound:
        return _check(
            name,
            INCONCLUSIVE,
            observed,
            bound,
            ">=",
            unit,
            f"{said}: under it, but the client sent up to {lost_share:.1%} of the window late, "
            f"which could account for it ({figure(free, unit)} without)",
            client_free=free,
            undecided="client",
        )
    return _check(name, FAIL, observed, bound, ">=", unit, said, client_free=free)


def evaluate(sla: Sla, evidence: Evidence) -> Verdict:
    """Every objective of ``sla`` as a check on ``evidence``, and the overall verdict."""
    confidence = sla.confidence
    checks = []
    share = evidence.client
    if sla.error_rate is not None:
        checks.append(
            error_rate_check(
                evidence.failed,
                evidence.failed + evidence.completed,
                sla.error_rate,
                confidence,
                share.failed,
            )
        )
    lost = share.dispatch_max_ms / 1e3 / evidence.window_s if evidence.window_s else 0.0
    for name, observed, unit in (
        ("output_tokens_per_s", evidence.output_tokens_per_s, "output tok/s"),
        ("requests_per_s", evidence.requests_per_s, "req/s"),
    ):
        bound = getattr(sla, name)
        if bound is not None:
            checks.append(floor_check(name, observed, bound, unit, lost))
    checks += _latency_checks(sla, evidence)
    if sla.answers_match_min is not None:
        checks.append(answers_check(evidence.answers, sla.answers_match_min, confidence))
    # a model mix: each model's latencies and errors judged on their own too (a floor on the
    # run's throughput is the run's: the models share it)
    for model, own in evidence.by_model.items():
        mine = []
        if sla.error_rate is not None:
            mine.append(
                error_rate_check(own.failed, own.failed + own.completed, sla.error_rate, confidence)
            )
        mine += _latency_checks(
            sla,
            replace(
                own,
                steady=evidence.steady,
                short_delivery=evidence.short_delivery,
                status=evidence.status,
                client=share,
            ),
        )
        checks += [c.model_copy(update={"name": f"{c.name} [{model}]"}) for c in mine]
    return decide(checks, evidence.status, evidence.reasons, evidence.client_lateness_only)


def _latency_checks(sla: Sla, evidence: Evidence) -> list[Check]:
    """Each latency bound of ``sla`` judged on ``evidence``'s histograms."""
    confidence, checks = sla.confidence, []
    hists = evidence.histograms or {}
    maybe_overloaded = evidence.steady is False or (
        evidence.steady is None and evidence.short_delivery
    )
    for name, metric, pct, bound_ns in sla.latency_bounds():
        hist = hists.get(metric, LatencyHistogram())
        check = percentile_check(
            name, hist, pct, bound_ns / 1e6, confidence, hists, evidence.client, metric
        )
        if maybe_overloaded and check.verdict == PASS:
            # A backlog that grows for the whole run: a longer run would show higher latencies.
            what = (
                "the run was overloaded (not steady)"
                if evidence.steady is False
                else "the run delivered less than it was offered, and too few requests show "
                "whether it kept up (stability unknown)"
            )
            check = check.model_copy(
                update={
                    "verdict": INCONCLUSIVE,
                    "undecided": "unsteady",
                    "reason": f"{what}: its latencies may grow with the run's length, so a "
                    f"pass now says nothing ({check.reason})",
                }
            )
        checks.append(check)
    return checks
