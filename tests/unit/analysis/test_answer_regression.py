"""gate --baseline on the answer match rate: a drop judged on Newcombe's interval for a
difference of two proportions, with hand-computed values."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from loadtest.analysis.answer_regression import answers_comparison, drop_interval
from loadtest.results.model import AnswersResult


def runs(compared: int, matched: int) -> list:
    a = AnswersResult(
        compared_on="text", reference_requests=compared, reference_s=1.0, reference_share=0.01,
        compared=compared, matched=matched, match_rate=matched / compared,
        match_interval=[0.0, 1.0], confidence=0.95, unanswered=0,
    )  # fmt: skip
    return [SimpleNamespace(answers=a)]


def test_the_drops_interval_is_newcombes():
    # 100 of 100 against 80 of 100 at 95%: Wilson (0.96300, 1) and (0.71120, 0.86667); the
    # drop 0.2, less sqrt(0.037^2 + 0.06667^2) = 0.07625, plus sqrt(0 + 0.0888^2) = 0.0888
    drop, lo, hi = drop_interval((100, 100), (100, 80), 0.95)
    assert drop == pytest.approx(0.2)
    assert (lo, hi) == (pytest.approx(0.1238, abs=1e-3), pytest.approx(0.2888, abs=1e-3))


def test_a_drop_fails_no_drop_passes_and_too_few_say_so():
    failed = answers_comparison(runs(200, 200), runs(200, 160), 0.05, 0.005)
    assert (
        failed is not None and failed["verdict"] == "FAIL" and "drop of +20.0%" in failed["reason"]
    )
    same = answers_comparison(runs(2000, 2000), runs(2000, 2000), 0.05, 0.005)
    assert same is not None and same["verdict"] == "PASS"
    few = answers_comparison(runs(10, 10), runs(10, 9), 0.05, 0.005)
    assert few is not None and (few["verdict"], few["undecided"]) == ("INCONCLUSIVE", "noise")
    assert answers_comparison([SimpleNamespace(answers=None)], runs(5, 5), 0.05, 0.005) is None
