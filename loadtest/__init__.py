"""loadtest: an LLM inference latency load tester that measures from the plan.

The public Python surface (the CLI is a thin layer over it)::

    from loadtest import load_scenario, run_scenario
    result = run_scenario(load_scenario("scenarios/chat.yml"), out_dir="reports/try")

Names are imported on first use, so ``import loadtest.core.clock`` (or ``loadtest --help``) does
not pull in the whole run path.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from loadtest.core._version import __version__

# public name -> the module that defines it
_EXPORTS = {
    "load_scenario": "loadtest.config.loading",
    "run_scenario": "loadtest.session",
    "RunResult": "loadtest.session",
    "RunMetrics": "loadtest.results.model",
    "LoadtestError": "loadtest.core.errors",
    "ScenarioError": "loadtest.core.errors",
    "BackendError": "loadtest.core.errors",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:
    from loadtest.config.loading import load_scenario as load_scenario
    from loadtest.core.errors import BackendError as BackendError
    from loadtest.core.errors import LoadtestError as LoadtestError
    from loadtest.core.errors import ScenarioError as ScenarioError
    from loadtest.results.model import RunMetrics as RunMetrics
    from loadtest.session import RunResult as RunResult
    from loadtest.session import run_scenario as run_scenario


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'loadtest' has no attribute {name!r}")
