"""The result's ``answers`` section: the answers under load compared with their references
(``execution.answer_check``), as counts, a match rate with its Wilson interval, and where the
diverged ones parted."""

from __future__ import annotations

from loadtest.config.scenario import Scenario
from loadtest.core.proportion import wilson
from loadtest.execution.answer_check import AnswerCheck, Tally
from loadtest.results.model import AnswersResult, AnswerTally


def answers_result(
    scenario: Scenario, check: AnswerCheck | None, window_s: float | None
) -> AnswersResult | None:
    """The answers compared with their references, where ``answers:`` asked for it."""
    if check is None:
        return None
    confidence = scenario.sla.confidence if scenario.sla is not None else 0.95
    whole = check.whole
    positions = sorted(check.positions)
    spent = check.reference_s + (window_s or 0.0)

    def tallies(by: dict[str, Tally]) -> dict[str, AnswerTally] | None:
        return {
            k: AnswerTally(compared=t.compared, matched=t.matched) for k, t in by.items()
        } or None

    return AnswersResult(
        compared_on="text",
        reference_requests=len(check.references),
        reference_s=round(check.reference_s, 3),
        reference_share=round(check.reference_s / spent, 4) if spent else None,
        compared=whole.compared,
        matched=whole.matched,
        match_rate=whole.matched / whole.compared if whole.compared else None,
        match_interval=list(wilson(whole.matched, whole.compared, confidence))
        if whole.compared
        else None,
        confidence=confidence,
        unanswered=check.unanswered,
        first_divergence={
            "min": float(positions[0]),
            "p50": float(positions[len(positions) // 2]),
            "max": float(positions[-1]),
        }
        if positions
        else None,
        by_endpoint=tallies(check.by_endpoint),
        by_model=tallies(check.by_model),
    )
