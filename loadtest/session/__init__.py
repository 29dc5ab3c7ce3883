"""Wiring: scenario -> backend -> plan -> runner -> metrics.json (+ SLA verdict).

``run_scenario`` is the Python API the CLI calls; a notebook can call it the same way.
"""

from loadtest.session.api import default_out_dir, run_scenario, run_scenario_async
from loadtest.session.point import Session
from loadtest.session.writing import ResultWriteError, RunResult

__all__ = [
    "ResultWriteError",
    "RunResult",
    "Session",
    "default_out_dir",
    "run_scenario",
    "run_scenario_async",
]
