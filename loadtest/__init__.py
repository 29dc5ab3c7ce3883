"""loadtest: an LLM inference latency load tester that measures from the plan.

The public Python surface (the CLI is a thin layer over it)::

    from loadtest import load_scenario, run_scenario
    result = run_scenario(load_scenario("scenarios/chat.yml"), out_dir="reports/try")
"""
__version__ = "0.1.0"

from .errors import BackendError, LoadtestError, ScenarioError  # noqa: E402
from .scenario_file import load_scenario  # noqa: E402
from .session import RunResult, run_scenario  # noqa: E402

__all__ = ["__version__", "load_scenario", "run_scenario", "RunResult", "LoadtestError", "ScenarioError", "BackendError"]
