"""The public Python API is pinned: a change to it is a deliberate edit of this list."""

from __future__ import annotations

import subprocess
import sys

import pytest

import loadtest

PUBLIC = [
    "__version__",
    "load_scenario",
    "run_scenario",
    "RunResult",
    "RunMetrics",
    "LoadtestError",
    "ScenarioError",
    "BackendError",
]


def test_all_is_pinned_and_every_name_resolves():
    assert loadtest.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(loadtest, name) is not None


@pytest.mark.integration
def test_importing_the_package_loads_none_of_the_run_path():
    code = (
        "import sys, loadtest; "
        "heavy = [m for m in ('loadtest.session', 'torch', 'transformers', 'aiohttp', 'numpy') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
