"""The ``LOADTEST_*`` settings a container job sets instead of flags: each is its flag's name,
docs/container.md lists exactly the ones the commands read, and a flag beats its variable."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main
from typer.testing import CliRunner

from loadtest.cli import app

ROOT = Path(__file__).resolve().parents[3]


def variables() -> dict[str, set[str]]:
    """Each ``LOADTEST_*`` variable, and the commands that read it."""
    found: dict[str, set[str]] = {}
    group = typer.main.get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        for param in command.params:
            if param.envvar:
                found.setdefault(param.envvar, set()).add(name)
    return found


def test_each_variable_is_its_flags_name():
    group = typer.main.get_command(app)
    for command in group.commands.values():  # type: ignore[attr-defined]
        for param in command.params:
            if param.envvar and param.opts[0].startswith("--"):
                assert param.envvar == "LOADTEST_" + param.opts[0][2:].upper().replace("-", "_")


def test_the_docs_list_exactly_the_variables_the_commands_read():
    documented = set(re.findall(r"`(LOADTEST_[A-Z_]+)`", (ROOT / "docs/container.md").read_text()))
    read = set(variables())
    # the image's own label is recorded, not a setting of a command
    assert documented - {"LOADTEST_CONTAINER_IMAGE"} == read
    assert {"run", "sweep", "validate", "plan"} <= variables()["LOADTEST_SET"]


def test_a_typed_flag_beats_its_variable_and_a_bad_value_names_the_variable(tmp_path):
    runner = CliRunner()
    scenario = ROOT / "scenarios" / "poisson-sla.yml"
    ok = runner.invoke(
        app,
        ["validate", str(scenario), "--set", "load.duration=1s"],
        env={"LOADTEST_SET": "load.duration=nonsense"},
    )
    assert ok.exit_code == 0, ok.output  # the typed --set, not the variable's bad duration
    used = runner.invoke(
        app, ["validate", str(scenario)], env={"LOADTEST_SET": "load.duration=nonsense"}
    )
    assert used.exit_code == 2 and "nonsense" in used.output  # untyped, the variable is used
    bad = runner.invoke(app, ["run", "--url", "http://127.0.0.1:1"], env={"LOADTEST_RATE": "x"})
    assert bad.exit_code == 2 and "LOADTEST_RATE" in bad.output
