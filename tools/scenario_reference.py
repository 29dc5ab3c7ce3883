"""The scenario reference page (docs/reference/scenario.md), generated from the JSON Schema the
scenario models produce, so that it cannot drift from the code.

    python tools/scenario_reference.py            # rewrite docs/reference/scenario.md
    python tools/scenario_reference.py --check    # exit 1 when the page is out of date

The docs build runs it first (tools/mkdocs_hooks.py), and a unit test checks the committed page.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "scenario.md"


def render() -> str:
    from loadtest.config.scenario import Scenario

    schema = Scenario.model_json_schema(by_alias=True)
    defs: dict[str, Any] = schema.get("$defs", {})
    out = [
        "# Scenario reference",
        "",
        "Every field a scenario file takes, generated from the scenario's JSON Schema "
        "(`loadtest schema scenario`; `python tools/scenario_reference.py` rewrites this page). "
        "Durations are seconds or a string with a unit (`500ms`, `30s`, `2m`); rates are "
        "requests a second. A field not listed is an error, named with its file and line.",
        "",
        "## Scenario",
        "",
        _description(schema),
        "",
        *_table(schema, defs),
    ]
    for name in sorted(defs):
        out += ["", f"## {name}", "", _description(defs[name]), "", *_table(defs[name], defs)]
    return "\n".join(line.rstrip() for line in out).rstrip() + "\n"


def _description(node: dict) -> str:
    return " ".join(str(node.get("description", "")).split())


def _table(node: dict, defs: dict) -> list[str]:
    props = node.get("properties", {})
    if not props:
        return []
    required = set(node.get("required", []))
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, prop in props.items():
        default = "required" if name in required else _default(prop)
        rows.append(f"| `{name}` | {_type(prop)} | {default} | {_cell(_description(prop))} |")
    return rows


def _default(prop: dict) -> str:
    if "default" not in prop:
        return ""
    return f"`{json.dumps(prop['default'])}`"


def _type(prop: dict) -> str:
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "const" in prop:
        return f"`{json.dumps(prop['const'])}`"
    if "enum" in prop:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    unit = _unit(prop)
    if unit:
        return unit
    for key in ("oneOf", "anyOf"):
        if key in prop:
            parts = [_type(p) for p in prop[key]]
            return " \\| ".join(dict.fromkeys(p for p in parts if p))
    kind = prop.get("type")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}))}"
    if kind == "object" and "additionalProperties" in prop:
        extra = prop["additionalProperties"]
        return "mapping" + (f" to {_type(extra)}" if isinstance(extra, dict) else "")
    return str(kind or "any")


def _unit(prop: dict) -> str | None:
    """A number-or-string with a unit (a duration or a rate), named by its examples."""
    examples = [e for e in prop.get("examples", []) if isinstance(e, str)]
    if not examples or "anyOf" not in prop:
        return None
    shown = ", ".join(f"`{e}`" for e in examples)
    return ("rate" if any("/" in e for e in examples) else "duration") + f" ({shown})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is out of date: python tools/scenario_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
        PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
