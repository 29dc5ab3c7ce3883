"""Gating a saved run on an SLA file: verdicts with evidence, JUnit XML, Markdown; exit code.

The SLA file holds the same mapping as a scenario's ``sla:`` block (``ttft_p99: 500ms``, ...),
validated by the same model. The run is judged from its saved JSON alone (a run directory, or
a repeat directory whose replicates are pooled). An invalid, interrupted or failed run is never
PASS: its verdict is INCONCLUSIVE at best. With baselines, each headline metric is also checked
for a regression (``loadtest.analysis.regression``: a stated minimum effect, a bootstrap that respects
autocorrelation and replication).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple
from xml.etree import ElementTree as ET

import yaml
from pydantic import ValidationError

from loadtest.analysis import regression
from loadtest.analysis.sla import evaluate
from loadtest.analysis.verdicts import FAIL, INCONCLUSIVE, overall, verdict_reasons
from loadtest.config.objectives import Sla
from loadtest.core import outside
from loadtest.core.errors import ScenarioError
from loadtest.core.json_types import JsonObject
from loadtest.core.units import figure
from loadtest.results.model import GateResult, Regression, Replicates, RunMetrics
from loadtest.results.runset import RunSet

SLA_FILE_BYTES = 16 << 20  # an SLA file (or a whole scenario) read for gate: larger is refused


def load_sla(path: Path) -> Sla:
    """The SLA file, validated by the scenario's own ``sla:`` model."""
    try:
        data = yaml.safe_load(outside.read_text(Path(path), SLA_FILE_BYTES))
    except OSError as exc:
        raise ScenarioError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except (outside.OutsideTextError, yaml.YAMLError) as exc:
        raise ScenarioError([f"{path}: {exc}"]) from None
    if isinstance(data, dict) and isinstance(data.get("sla"), dict):
        data = data["sla"]  # a whole scenario file works too
    try:
        model = Sla.model_validate(data if data is not None else {})
    except ValidationError as exc:
        raise ScenarioError(
            [
                f"{path}: {'.'.join(map(str, e['loc']))}: {e['msg']}"
                for e in exc.errors(include_url=False)
            ]
        ) from None
    return model


def gate(
    run: RunSet,
    sla: Sla | None,
    baselines: Sequence[RunSet] = (),
    *,
    metrics: Sequence[str] | None = None,
    min_effect: float = 0.05,
    confidence: float = 0.99,
) -> GateResult:
    """SLA checks on the pooled run, regression checks against the pooled baselines; one verdict.
    ``metrics`` None: ``regression.default_metrics`` for these runs."""
    pooled = run.pooled()
    result = GateResult(status=pooled.status, reasons=pooled.reasons, checks=[])
    if sla is not None and pooled.histograms is not None:
        result.checks = evaluate(sla, pooled).checks
    elif sla is not None:
        result.warnings.append("SLA: nothing was measured in the run")
    if baselines:
        base_runs = [m for b in baselines for m in b.measured]
        if not run.measured or not base_runs:
            result.warnings.append(
                "regression: nothing measured "
                + ("in the run" if not run.measured else "in the baselines")
            )
        else:
            if metrics is None:
                metrics = regression.default_metrics([*base_runs, *run.measured])
                if "output_tokens_per_s" not in metrics:
                    result.warnings.append(
                        "output_tokens_per_s not compared: an open loop's offered rate sets its "
                        "throughput (whether it was carried is the stability verdict's); "
                        "--metric output_tokens_per_s compares it all the same"
                    )
            result.regression = Regression(
                baselines=[str(b.path) for b in baselines],
                min_effect=min_effect,
                confidence=confidence,
                replicates=Replicates(baseline=len(base_runs), candidate=len(run.measured)),
                checks=regression.as_checks(
                    regression.compare(
                        base_runs,
                        run.measured,
                        metrics,
                        min_effect=min_effect,
                        confidence=confidence,
                    )
                ),
            )
            result.warnings += scenario_differences(base_runs[0], run.measured[0])
    checks = all_checks(result)
    verdict = (  # nothing checked: no evidence
        overall([c.verdict for c in checks], pooled.status, pooled.client_lateness_only)
        if checks
        else INCONCLUSIVE
    )
    result.verdict = verdict  # type: ignore[assignment]
    result.verdict_reasons = verdict_reasons(
        [(f"{c.kind} {c.name}", c.verdict, c.evidence) for c in checks],
        verdict,
        pooled.status,
        pooled.reasons,
        pooled.client_lateness_only,
    )
    return result


def scenario_differences(base: RunMetrics, cand: RunMetrics) -> list[str]:
    """What differs between the scenarios that produced two runs (seeds and output settings aside)."""

    def flat(d: JsonObject | None, prefix: str = "") -> JsonObject:
        out: JsonObject = {}
        for k, v in (d or {}).items():
            if isinstance(v, dict):
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out

    a, b = flat(base.scenario), flat(cand.scenario)
    keys = sorted(
        k
        for k in set(a) | set(b)
        if a.get(k) != b.get(k) and not k.startswith(("seeds.", "outputs.", "name"))
    )
    warnings = []
    if keys:
        warnings.append(
            "baseline and run differ in "
            + ", ".join(f"{k} ({a.get(k)!r} -> {b.get(k)!r})" for k in keys[:6])
            + (" ..." if len(keys) > 6 else "")
        )
    ga, gb = (_gpu_name(x) for x in (base, cand))
    if ga != gb:
        warnings.append(f"baseline ran on {ga or 'no GPU'}, this run on {gb or 'no GPU'}")
    return warnings


def _gpu_name(metrics: RunMetrics) -> str | None:
    gpus = metrics.environment.gpus or []
    return gpus[0].name if gpus else None


class GateCheck(NamedTuple):
    """An SLA or regression check, in the shape JUnit cases and summaries share."""

    kind: str  # sla | regression
    name: str
    verdict: str
    evidence: str  # one line: the figures and the reason


def all_checks(result: GateResult) -> list[GateCheck]:
    """Every SLA check, then every regression check."""
    out = [GateCheck("sla", c.name, c.verdict, c.reason) for c in result.checks]
    for r in result.regression.checks if result.regression else []:
        out.append(
            GateCheck(
                "regression",
                r.name,
                r.verdict,
                f"{_figure(r.candidate, r.unit)} against the baseline's "
                f"{_figure(r.baseline, r.unit)}: {r.reason}",
            )
        )
    return out


def _figure(x: float | None, unit: str) -> str:
    return "-" if x is None else figure(x, unit)


def junit_xml(result: GateResult, name: str) -> str:
    """One test case per check; FAIL is a failure, INCONCLUSIVE is skipped (with the reason)."""
    checks = all_checks(result)
    suite = ET.Element(
        "testsuite",
        name=f"loadtest gate: {name}",
        tests=str(len(checks)),
        failures=str(sum(c.verdict == FAIL for c in checks)),
        skipped=str(sum(c.verdict == INCONCLUSIVE for c in checks)),
    )
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=f"loadtest.{c.kind}", name=c.name)
        if c.verdict == FAIL:
            ET.SubElement(case, "failure", message=c.evidence).text = c.evidence
        elif c.verdict == INCONCLUSIVE:
            ET.SubElement(case, "skipped", message=c.evidence)
    if result.status != "ok":
        case = ET.SubElement(suite, "testcase", classname="loadtest.run", name="run_validity")
        said = f"run {result.status}: {'; '.join(result.reasons)}"
        if result.verdict == INCONCLUSIVE:
            ET.SubElement(case, "skipped", message=said)
        else:  # the checks took the client's lateness into account: said, not skipped
            ET.SubElement(case, "system-out").text = said
    ET.SubElement(suite, "system-out").text = "\n".join(
        [f"verdict: {result.verdict}"] + result.verdict_reasons
    )
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def markdown(result: GateResult, name: str) -> str:
    """The gate's verdict and checks as a Markdown summary (CI step summaries)."""
    lines = [f"### loadtest gate: {name}: **{result.verdict}**", ""]
    if result.checks:
        lines += ["| SLA check | verdict | observed | bound | evidence |", "|---|---|---|---|---|"]
        for c in result.checks:
            lines.append(
                f"| {c.name} | {c.verdict} | {c.observed} | {c.op} {c.bound} {c.unit} | {_cell(c.reason)} |"
            )
        lines.append("")
    reg = result.regression
    if reg:
        lines += [
            f"Regression against {', '.join(reg.baselines)} (minimum effect {reg.min_effect:.0%}, "
            f"{reg.confidence:.0%} simultaneous confidence; replicates {reg.replicates.baseline} vs "
            f"{reg.replicates.candidate}):",
            "",
            "| metric | verdict | baseline | this run | change | evidence |",
            "|---|---|---|---|---|---|",
        ]
        for r in reg.checks:
            change = "-" if r.change_pct is None else f"{r.change_pct:+.1f}%"
            lines.append(
                f"| {r.name} | {r.verdict} | {_fmt(r.baseline)} | {_fmt(r.candidate)} {r.unit} | "
                f"{change} | {_cell(r.reason)} |"
            )
        lines.append("")
    if result.verdict_reasons:
        lines += [f"Why {result.verdict}:", ""] + [f"- {_cell(r)}" for r in result.verdict_reasons]
        lines.append("")
    for w in result.warnings:
        lines.append(f"Warning: {_cell(w)}")
    if result.status != "ok":
        lines += ["", f"Run status: **{result.status}**: " + "; ".join(result.reasons)]
    return "\n".join(lines) + "\n"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"
