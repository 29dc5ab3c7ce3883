"""The project's own Student's t quantile against scipy's, on a grid (the light install has no
scipy; the tests do)."""

from __future__ import annotations

import math

import pytest

from loadtest.analysis import student_t


@pytest.mark.parametrize("dof", [0.5, 1, 1.5, 2, 3, 4.7, 5, 10, 29.3, 30, 100, 1e3, 1e5, math.inf])
def test_the_quantile_agrees_with_scipy(dof):
    from scipy.stats import t

    for p in (1e-6, 0.001, 0.0125, 0.025, 0.1, 0.5, 0.9, 0.975, 0.99, 0.9986, 0.99993, 1 - 1e-7):
        ours, theirs = student_t.quantile(p, dof), float(t.ppf(p, dof))
        assert ours == pytest.approx(theirs, rel=1e-8, abs=1e-9), (p, dof)
        assert student_t.cdf(ours, dof) == pytest.approx(p, rel=1e-9) if dof < 1e7 else True


def test_by_hand():
    # dof 1 is Cauchy: quantile tan(pi (p - 1/2)); dof 2 has t = (2p - 1) / sqrt(2 p (1 - p))
    assert student_t.quantile(0.75, 1) == pytest.approx(1.0, rel=1e-10)
    assert student_t.quantile(0.9, 2) == pytest.approx(0.8 / math.sqrt(2 * 0.9 * 0.1), rel=1e-10)
    assert student_t.quantile(0.5, 7) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError):
        student_t.quantile(1.0, 3)
