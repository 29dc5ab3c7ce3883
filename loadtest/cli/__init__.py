"""The command line: a thin typer layer over ``loadtest.session`` and the reporters.

One module a command (or a few small ones); options several commands take are declared once in
``options``. Exit codes are defined once, in ``loadtest.core.exit_codes`` (docs list them).
"""

from __future__ import annotations

import typer

from loadtest.cli import gating, help_style, planning, reports, run, sweep, tools
from loadtest.core import exit_codes

HELP_NAMES = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    cls=help_style.Group,
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=HELP_NAMES,
    help="LLM inference latency load tester.",
)
for command in (run.run, sweep.sweep, tools.validate, planning.plan, reports.report, gating.gate,
                gating.compare, tools.env, tools.calibrate, tools.schema, tools.version,
                tools.mock_server):  # fmt: skip
    app.command(cls=help_style.Command, context_settings=HELP_NAMES)(command)


def _print_version(value: bool) -> None:
    if value:
        from loadtest.core._version import __version__

        typer.echo(f"loadtest {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        callback=_print_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """LLM inference latency load tester."""


def main() -> None:
    """The ``loadtest`` entry point: a crash is an internal error (exit 5), never exit 1, which
    means "SLA failed" to a release pipeline."""
    import sys
    import traceback

    from loadtest.core import secrets

    # every channel out of the process passes the one scrubber: echoes, --json, tables, errors
    sys.stdout, sys.stderr = secrets.scrubbed(sys.stdout), secrets.scrubbed(sys.stderr)
    try:
        app()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(exit_codes.INTERRUPTED)
    except Exception:
        sys.stderr.write(traceback.format_exc())
        sys.stderr.write(
            "loadtest: internal error (a bug in loadtest): please report it with the "
            "traceback above\n"
        )
        sys.exit(exit_codes.INTERNAL)
