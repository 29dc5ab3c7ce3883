"""Exit codes: the one definition the CLI, the gate and the docs use.

A release pipeline branches on these, so each means one thing: 1 is only ever "the SLA (or gate)
said FAIL", never a crash.
"""

from __future__ import annotations

import signal

OK = 0
SLA_FAILED = 1  # an SLA check or the regression gate said FAIL
USAGE = 2  # bad command line, scenario, SLA file, output directory or saved result
INVALID = 3  # the run is invalid (the client was the bottleneck, too few samples) or a verdict INCONCLUSIVE
FAILED = 4  # the system under test failed: did not start, crashed, stopped answering
INTERNAL = 5  # a bug in loadtest (the traceback is printed)
OUTPUT = 6  # the run finished but its result could not be written (disk full, ...)

# Interrupted runs exit 128 + the signal number, as a shell reports a process killed by it.
SIGNALS = {
    "SIGINT": 128 + signal.SIGINT,
    "SIGTERM": 128 + signal.SIGTERM,
    "SIGHUP": 128 + signal.SIGHUP,
}
INTERRUPTED = SIGNALS["SIGINT"]  # 130

DESCRIPTIONS = {
    OK: "ok (and the SLA passed, if any)",
    SLA_FAILED: "SLA or gate FAIL",
    USAGE: "usage error: command line, scenario, SLA file, output directory, or an unreadable result",
    INVALID: "run invalid, or a verdict INCONCLUSIVE",
    FAILED: "the system under test failed (did not start, crashed, stopped answering)",
    INTERNAL: "internal error (a bug in loadtest)",
    OUTPUT: "the result could not be written",
    **{code: f"interrupted by {name} (partial result written)" for name, code in SIGNALS.items()},
}


# A verdict's exit code: the one table the gate and a run's SLA share.
VERDICTS = {"PASS": OK, "FAIL": SLA_FAILED, "INCONCLUSIVE": INVALID}


def for_verdict(verdict: str | None) -> int:
    """The exit code of an SLA or gate verdict (no verdict: ok)."""
    return VERDICTS.get(verdict or "", OK)


def for_result(status: str, verdict: str | None, interrupted_by: str | None = None) -> int:
    """The exit code of a run, a replicate set, a sweep point or a gate, by one precedence
    (docs/outputs.md): interrupted (128 + N) > the system under test failed (4) > the verdict
    (FAIL 1, INCONCLUSIVE 3, PASS 0) > an invalid run with no verdict (3) > ok (0).

    A verdict already weighs the run's validity: it is PASS on an invalid run only where every
    reason is the client's own lateness, which each check counted against the server."""
    if status == "interrupted":
        return SIGNALS.get(interrupted_by or "SIGINT", INTERRUPTED)
    if status == "failed":
        return FAILED
    if verdict is not None:
        return for_verdict(verdict)
    return INVALID if status == "invalid" else OK


def for_gate(status: str, verdict: str) -> int:
    """The exit code of ``gate`` on a saved run: the same precedence, except that the run's
    own interruption is not this command's (its verdict is INCONCLUSIVE at best, or FAIL)."""
    return for_result("ok" if status == "interrupted" else status, verdict)
