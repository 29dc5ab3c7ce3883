"""The scenario reference page is generated from the code: the committed page is the one the
generator writes now (a field added without regenerating it fails here, and in the docs build)."""

from __future__ import annotations

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_committed_scenario_reference_is_current():
    tool = runpy.run_path(str(ROOT / "tools" / "scenario_reference.py"))
    page = ROOT / "docs" / "reference" / "scenario.md"
    assert page.read_text(encoding="utf-8") == tool["render"](), (
        "docs/reference/scenario.md is out of date: python tools/scenario_reference.py"
    )


def test_every_top_level_field_has_a_row():
    text = (ROOT / "docs" / "reference" / "scenario.md").read_text(encoding="utf-8")
    for field in ("name", "seeds", "backend", "workload", "load", "sla", "goodput", "outputs"):
        assert f"| `{field}` |" in text
