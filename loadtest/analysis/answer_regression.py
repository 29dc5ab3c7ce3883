"""A candidate's answer match rate against its baseline's (``answers:`` in both): a drop in
the share of answers under load that match their references alone, judged on Newcombe's
interval for a difference of two proportions (each side's Wilson interval), the gate's own
rule in the rate's terms: FAIL when the drop's interval lies above no change and the observed
drop is over the minimum effect, PASS when its upper end is at most the minimum effect."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from loadtest.analysis.sla import FAIL, INCONCLUSIVE, PASS
from loadtest.core.proportion import wilson
from loadtest.results.model import RunMetrics

NAME = "answers_match"


def counts(runs: Sequence[RunMetrics]) -> tuple[int, int] | None:
    """Answers compared and matched over ``runs`` (None: none checked them)."""
    checked = [r.answers for r in runs if r.answers is not None]
    if not checked:
        return None
    return sum(a.compared for a in checked), sum(a.matched for a in checked)


def drop_interval(
    base: tuple[int, int], cand: tuple[int, int], confidence: float
) -> tuple[float, float, float]:
    """The drop (baseline rate - candidate rate) and Newcombe's interval for it."""
    (nb, mb), (nc, mc) = base, cand
    pb, pc = mb / nb, mc / nc
    lb, ub = wilson(mb, nb, confidence)
    lc, uc = wilson(mc, nc, confidence)
    drop = pb - pc
    lo = drop - math.sqrt((pb - lb) ** 2 + (uc - pc) ** 2)
    hi = drop + math.sqrt((ub - pb) ** 2 + (pc - lc) ** 2)
    return drop, lo, hi


def answers_comparison(
    baseline_runs: Sequence[RunMetrics],
    candidate_runs: Sequence[RunMetrics],
    min_effect: float,
    tail: float,
) -> dict[str, Any] | None:
    """The ``Comparison`` fields of the match-rate check, or None where a side has no answers
    checked (nothing to compare). ``tail``: this check's share of the gate's error rate; the
    rates as figures, the ratio baseline / candidate (> 1 worse), ``min_effect`` a relative
    drop of the baseline's rate."""
    base, cand = counts(baseline_runs), counts(candidate_runs)
    if base is None or cand is None:
        return None
    fields: dict[str, Any] = {"name": NAME, "unit": "share", "lower_is_better": False}
    if not base[0] or not cand[0]:
        return fields | {
            "baseline": None,
            "candidate": None,
            "ratio": None,
            "lo": None,
            "hi": None,
            "verdict": INCONCLUSIVE,
            "reason": "no answer compared on one side",
            "undecided": "not_measured",
        }
    pb, pc = base[1] / base[0], cand[1] / cand[0]
    drop, lo, hi = drop_interval(base, cand, 1 - 2 * tail)
    said = (
        f"{cand[1]} of {cand[0]} answers matched ({pc:.1%}) against the baseline's "
        f"{base[1]} of {base[0]} ({pb:.1%}): a drop of {drop:+.1%} ({lo:+.1%}..{hi:+.1%})"
    )
    allowed = min_effect * pb
    if lo > 0 and drop > allowed:
        verdict, undecided, why = FAIL, None, f"{said}, over the {allowed:.1%} allowed"
    elif hi <= allowed:
        verdict, undecided, why = PASS, None, f"{said}, within the {allowed:.1%} allowed"
    else:
        verdict, undecided = INCONCLUSIVE, "noise"
        why = f"{said}: too few compared to tell a drop of {allowed:.1%} from none"
    ratio = pb / pc if pc else None
    return fields | {
        "baseline": pb,
        "candidate": pc,
        "ratio": ratio,
        "lo": pb / (pb - lo) if pb - lo > 0 else None,
        "hi": pb / (pb - hi) if pb - hi > 0 else None,
        "verdict": verdict,
        "reason": why,
        "undecided": undecided,
    }
