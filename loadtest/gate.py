"""Gating a saved run on an SLA file: verdicts with evidence, JUnit XML, Markdown; exit code.

The SLA file holds the same mapping as a scenario's ``sla:`` block (``ttft_p99: 500ms``, ...),
validated by the same model. The run is judged from its metrics.json alone. An invalid,
interrupted or failed run is never PASS: its verdict is INCONCLUSIVE at best.
Baseline regression (block bootstrap over replicated runs) is not built yet.
"""
from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import yaml
from pydantic import ValidationError

from .errors import ScenarioError
from .scenario import Sla
from .sla import FAIL, INCONCLUSIVE, PASS, evaluate


def load_sla(path: Path) -> dict:
    """The SLA file as the mapping ``sla.evaluate`` takes (durations as written, validated)."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError([f"{path}: {exc}"]) from None
    if isinstance(data, dict) and isinstance(data.get("sla"), dict):
        data = data["sla"]  # a whole scenario file works too
    try:
        model = Sla.model_validate(data if data is not None else {})
    except ValidationError as exc:
        raise ScenarioError([f"{path}: {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)]) from None
    return model.model_dump(mode="json", exclude_none=True)


def gate(run_dir: Path, sla: dict) -> dict:
    metrics = json.loads((Path(run_dir) / "metrics.json").read_text())
    if "histograms" not in metrics:  # a run that failed before measuring anything
        return {"verdict": INCONCLUSIVE, "status": metrics.get("status"), "checks": [],
                "reasons": metrics.get("validity", {}).get("reasons", [])}
    result = evaluate(sla, metrics)
    result["status"] = metrics["status"]
    result["reasons"] = metrics["validity"]["reasons"]
    return result


def junit_xml(result: dict, name: str) -> str:
    """One test case per check; FAIL is a failure, INCONCLUSIVE is skipped (with the reason)."""
    suite = ET.Element("testsuite", name=f"loadtest gate: {name}", tests=str(len(result["checks"])),
                       failures=str(sum(c["verdict"] == FAIL for c in result["checks"])),
                       skipped=str(sum(c["verdict"] == INCONCLUSIVE for c in result["checks"])))
    for c in result["checks"]:
        case = ET.SubElement(suite, "testcase", classname="loadtest.sla", name=c["name"])
        text = f"observed {c['observed']} {c['unit']} {c['op']} {c['bound']} {c['unit']}: {c['reason']}"
        if c["verdict"] == FAIL:
            ET.SubElement(case, "failure", message=text).text = text
        elif c["verdict"] == INCONCLUSIVE:
            ET.SubElement(case, "skipped", message=text)
    if result["status"] != "ok":
        case = ET.SubElement(suite, "testcase", classname="loadtest.run", name="run_validity")
        ET.SubElement(case, "skipped", message=f"run {result['status']}: {'; '.join(result['reasons'])}")
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def markdown(result: dict, name: str) -> str:
    lines = [f"### loadtest gate: {name}: **{result['verdict']}**", "", "| check | verdict | observed | bound | evidence |",
             "|---|---|---|---|---|"]
    for c in result["checks"]:
        reason = str(c["reason"]).replace("|", "\\|")
        lines.append(f"| {c['name']} | {c['verdict']} | {c['observed']} | {c['op']} {c['bound']} {c['unit']} | {reason} |")
    if result["status"] != "ok":
        lines += ["", f"Run status: **{result['status']}**: " + "; ".join(result["reasons"])]
    return "\n".join(lines) + "\n"


EXIT = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
