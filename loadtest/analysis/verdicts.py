"""A verdict from its checks, and the reasons it rests on: FAIL if any check failed;
INCONCLUSIVE if any could not decide, or the run is not ok for a reason the checks could not
take into account; else PASS. SLA checks and a gate's regression checks share the rule."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from loadtest.results.model import Check, Verdict

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"


def overall(
    checks: Iterable[Check | str], status: str = "ok", client_lateness_only: bool = False
) -> str:
    """FAIL if any check failed; else INCONCLUSIVE if any was, or the run is not ok for a
    reason the checks could not take into account; else PASS. ``checks``: Check objects or
    verdict strings. An invalid run whose every reason is the client's own lateness can PASS:
    each check has counted that lateness against the server already."""
    verdicts = {c if isinstance(c, str) else c.verdict for c in checks}
    if FAIL in verdicts:
        return FAIL
    if INCONCLUSIVE in verdicts:
        return INCONCLUSIVE
    if status == "ok" or (status == "invalid" and client_lateness_only):
        return PASS
    return INCONCLUSIVE


def decide(
    checks: list[Check],
    status: str,
    run_reasons: Sequence[str] = (),
    client_lateness_only: bool = False,
) -> Verdict:
    """The overall verdict of ``checks`` on a run of ``status``, with the reasons it rests on."""
    verdict = overall(checks, status, client_lateness_only)
    reasons = verdict_reasons(
        [(c.name, c.verdict, c.reason) for c in checks],
        verdict,
        status,
        run_reasons,
        client_lateness_only,
    )
    return Verdict(verdict=verdict, checks=checks, reasons=reasons)


def verdict_reasons(
    checks: Iterable[tuple[str, str, str]],
    verdict: str,
    status: str,
    run_reasons: Sequence[str] = (),
    client_lateness_only: bool = False,
) -> list[str]:
    """What a verdict rests on: each failed and each undecided check (name, verdict, reason),
    and the run's status where it is not ok (why a verdict that every check passed is still
    INCONCLUSIVE, or why an invalid run's verdict stands)."""
    checks = list(checks)
    reasons = [f"{name} failed: {reason}" for name, v, reason in checks if v == FAIL]
    reasons += [f"{name} undecided: {reason}" for name, v, reason in checks if v == INCONCLUSIVE]
    why = "; ".join(run_reasons) or "no reason recorded"
    if status == "ok":
        pass
    elif status == "invalid" and client_lateness_only:
        reasons.append(
            f"the run is invalid only for the client's own lateness ({why}); every check "
            "counted that lateness against the server, so the checks' verdicts stand"
        )
    elif verdict == INCONCLUSIVE and not reasons:
        reasons.append(
            f"the run is {status} ({why}): every check passed, but no PASS can rest on a run "
            f"that is {status} for a reason the checks cannot take into account"
        )
    else:
        reasons.append(f"the run is {status}: {why}")
    if not checks:
        reasons.append("nothing was checked: no evidence either way")
    return reasons
