"""The command line as a new user first meets it: --version, -h, and help that names values as
a shell user reads them."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from loadtest.cli import app
from loadtest.core._version import __version__

COMMANDS = ["run", "sweep", "validate", "report", "gate", "compare", "env", "calibrate",
            "schema", "version"]  # fmt: skip


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_the_version_flag_prints_the_version_and_exits_0(flag):
    r = CliRunner().invoke(app, [flag])
    assert r.exit_code == 0 and r.output.strip() == f"loadtest {__version__}"


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_help_opens_with_h_and_names_no_python_type(command):
    args = ([command] if command else []) + ["-h"]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    assert "Usage: " in r.output
    # typer would write <bool>, <str>, <path>, <list[Path]>: Python's names, not a shell's
    assert not re.search(r"<(bool|str|int|float|path|list\[[^]]*\]|Path)>", r.output), r.output


def test_flags_show_no_value_and_options_name_theirs():
    r = CliRunner().invoke(app, ["compare", "-h"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    lines = {line.split()[1]: line for line in r.output.splitlines() if line.startswith("│ --")}
    assert lines["--json"].split()[2] == "Print"  # a flag: its help follows its name
    assert lines["--metric"].split()[2] == "TEXT"
    assert lines["--html"].split()[2] == "PATH"
    assert "RUN_A" in r.output and "RUN_B" in r.output


def test_options_without_typers_type_descriptor_are_named_from_clicks_types():
    # typer before 0.29 (0.16 .. 0.28) builds options on click's types and has no descriptor
    import types

    click = pytest.importorskip("click")
    from loadtest.cli.help_style import _metavar

    def option(kind):
        return types.SimpleNamespace(is_flag=False, count=False, type=kind)

    assert _metavar(option(click.Path())) == "PATH"
    assert _metavar(option(click.File())) == "PATH"
    assert _metavar(option(click.INT)) == "INTEGER"
    assert _metavar(option(click.FLOAT)) == "FLOAT"
    assert _metavar(option(click.STRING)) == "TEXT"
    assert _metavar(option(click.Choice(["md", "html"]))) == "[md|html]"
    assert _metavar(option(click.UUID)) == "VALUE"
    assert _metavar(types.SimpleNamespace(is_flag=True, type=click.BOOL)) == ""
