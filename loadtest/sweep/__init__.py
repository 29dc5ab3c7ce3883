"""Sweeps: one scenario at several settings, the model loaded once; curves, frontier, knee.

Every point is validated before the first one runs, then each runs the full warmup / measure /
drain protocol into its own run directory (``grid``); ``find_max_rate`` searches the highest
rate that meets the SLA (``max_rate``); ``curve`` draws the figures across points.
"""

from loadtest.sweep.curve import curves, headline, knee_caveats
from loadtest.sweep.grid import AXES, SweepResult, parse_axes, point_row, points_of, run_sweep
from loadtest.sweep.max_rate import find_max_rate, judge_point, lengthen

__all__ = [
    "AXES",
    "SweepResult",
    "curves",
    "find_max_rate",
    "headline",
    "judge_point",
    "knee_caveats",
    "lengthen",
    "parse_axes",
    "point_row",
    "points_of",
    "run_sweep",
]
