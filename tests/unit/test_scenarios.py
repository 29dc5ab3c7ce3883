"""Every shipped scenario validates as a run would, and the simulated ones run (virtual clock)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.config.loading import load_scenario, resolve_path
from loadtest.core.clock import run_virtual
from loadtest.session import run_scenario_async
from loadtest.workload.plan import check_plan

SHIPPED = sorted((Path(__file__).parents[2] / "scenarios").glob("*.yml"))


def test_the_scenarios_folder_is_found():
    assert {p.name for p in SHIPPED} >= {"chat.yml", "poisson-sla.yml", "sim-demo.yml"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_each_shipped_scenario_passes_validate(path):
    loaded = load_scenario(path)
    check_plan(loaded.scenario, lambda name: resolve_path(loaded, name))


@pytest.mark.parametrize(
    "path",
    [p for p in SHIPPED if load_scenario(p).scenario.backend.kind == "sim"],
    ids=lambda p: p.name,
)
def test_each_simulated_scenario_runs_and_writes_its_result(path, tmp_path):
    loaded = load_scenario(path, ["telemetry.gpu=false"])
    result = run_virtual(lambda clock: run_scenario_async(loaded, tmp_path / "run", clock=clock))
    r = result.result.requests
    # sim-demo is over capacity on purpose (its measured requests time out in the drain)
    assert result.status in ("ok", "invalid") and r.sent == r.planned and r.completed + r.failed > 0
    assert (tmp_path / "run" / "metrics.json").exists()
    assert (result.sla_verdict is not None) == (loaded.scenario.sla is not None)
