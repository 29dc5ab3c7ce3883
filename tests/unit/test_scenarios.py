"""Every shipped scenario validates as a run would, and the simulated ones run (virtual clock)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

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
    # sim-demo is over capacity on purpose (its backlog times out in the drain)
    assert result.status in ("ok", "invalid") and r.sent == r.planned and r.completed + r.failed > 0
    assert (tmp_path / "run" / "metrics.json").exists()
    assert (result.sla_verdict is not None) == (loaded.scenario.sla is not None)


def test_every_shipped_scenario_fits_the_published_json_schema():
    """The schema describes what users write: an editor pointed at it (as the README says)
    accepts every shipped scenario, and flags what the loader refuses."""
    import json

    import jsonschema
    from typer.testing import CliRunner

    from loadtest.cli import app

    schema = json.loads(CliRunner().invoke(app, ["schema", "scenario"]).output)
    validator = jsonschema.Draft202012Validator(schema)
    shipped = sorted(Path("scenarios").glob("*.yml"))
    assert len(shipped) >= 10
    for path in shipped:
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert not errors, (path, errors)
    data = yaml.safe_load(Path("scenarios/sim-demo.yml").read_text())
    data["load"]["duration"] = "soon"
    assert list(validator.iter_errors(data))
    data["load"]["duration"] = "200ms"
    data["load"]["arrival"]["rate"] = "120/m"
    assert not list(validator.iter_errors(data))
