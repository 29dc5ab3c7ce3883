"""The command line: a thin typer layer over ``loadtest.session`` and the reporters.

One module a command (or a few small ones); options several commands take are declared once in
``options``. Exit codes are defined once, in ``loadtest.core.exit_codes`` (docs list them).
"""

from __future__ import annotations

import typer

from loadtest.cli import gating, reports, run, sweep, tools
from loadtest.core import exit_codes

app = typer.Typer(
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="LLM inference latency load tester.",
)
app.command()(run.run)
app.command()(sweep.sweep)
app.command()(tools.validate)
app.command()(reports.report)
app.command("gate")(gating.gate)
app.command()(gating.compare)
app.command()(tools.env)
app.command()(tools.calibrate)
app.command()(tools.schema)
app.command()(tools.version)


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
