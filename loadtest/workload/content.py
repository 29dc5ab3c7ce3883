"""What a request carries besides its prompt, made ready before t0: tool definitions (read from
a file and checked, or made up from a seed), the answer format with the schema its outputs are
checked against, and the per-request media (``media.py``).

Files are read and checked here, at plan time, so a bad one fails the run before anything is
sent, with its path and the place in it that is wrong.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.config.content import ResponseFormat, Tools
from loadtest.config.scenario import Scenario
from loadtest.core import outside
from loadtest.core.errors import ScenarioError

MAX_CONTENT_FILE_BYTES = 16 << 20  # a tools or schema file: definitions, not data

# the parameter kinds synthetic tools take, as JSON Schema
_PARAMETER_KINDS = (
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "string", "enum": ["low", "medium", "high"]},
)
_WORDS = (
    "weather city date unit query limit price region account order status topic language "
    "amount currency start end user item count level"
).split()


@dataclass(frozen=True)
class Content:
    """The tools offered (chat's form: ``{"type": "function", "function": {...}}``), the
    tool_choice sent, and the answer format (as chat sends it) with its schema, if any."""

    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    response_format: dict | None = None
    answer_schema: dict | None = None  # what a structured answer is validated against

    @property
    def tool_schemas(self) -> dict[str, dict]:
        """Each offered tool's parameters schema, by name."""
        return {
            t["function"]["name"]: t["function"].get("parameters") or {"type": "object"}
            for t in self.tools or []
        }

    @property
    def must_call(self) -> bool:
        """Whether each answer has to be a tool call (required, or one tool named)."""
        return self.tool_choice == "required" or isinstance(self.tool_choice, dict)


def load_content(scenario: Scenario, resolve: Callable[[str], Path]) -> Content:
    """The scenario's tools and answer format, files read and checked (``ScenarioError``)."""
    w = scenario.workload
    tools = choice = None
    if w.tools is not None:
        tools = _tools(w.tools, resolve, scenario.seeds.prompts)
        choice = _choice(w.tools, tools)
    fmt, schema = (None, None) if w.response_format is None else _format(w.response_format, resolve)
    return Content(tools, choice, fmt, schema)


def _tools(spec: Tools, resolve: Callable[[str], Path], seed: int) -> list[dict]:
    if spec.count is not None:
        return synthetic_tools(spec.count, seed)
    assert spec.file is not None
    path = resolve(spec.file)
    data = _read_json(path, "workload.tools.file")
    if not isinstance(data, list) or not data:
        raise ScenarioError(
            [f"{path}: workload.tools.file: expected a JSON list of tool definitions"]
        )
    tools, names = [], set()
    for i, tool in enumerate(data):
        where = f"{path}: tool [{i}]"
        if isinstance(tool, dict) and tool.get("type") == "function" and "function" not in tool:
            # the Responses API's flat form: {"type": "function", "name", "parameters"}
            tool = {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise ScenarioError(
                [f'{where}: expected {{"type": "function", "function": {{"name": ..., '
                 '"parameters": {...}}}']
            )  # fmt: skip
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ScenarioError([f"{where}: function.name: expected a non-empty string"])
        if name in names:
            raise ScenarioError([f"{where}: function.name: {name!r} is given twice"])
        names.add(name)
        params = fn.get("parameters", {"type": "object", "properties": {}})
        problem = _schema_problem(params)
        if problem:
            raise ScenarioError([f"{where} ({name}): function.parameters: {problem}"])
        tools.append({"type": "function", "function": {**fn, "parameters": params}})
    return tools


def synthetic_tools(count: int, seed: int) -> list[dict]:
    """``count`` function tools, seeded: each takes 1-4 typed parameters, all required."""
    rng = random.Random(seed * 7_919 + 17)
    tools = []
    for k in range(count):
        params = rng.sample(_WORDS, rng.randint(1, 4))
        properties = {p: dict(rng.choice(_PARAMETER_KINDS)) for p in params}
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": f"tool_{k}",
                    "description": f"Looks up {' and '.join(params)}.",
                    "parameters": {
                        "type": "object",
                        "properties": properties,
                        "required": params,
                    },
                },
            }
        )
    return tools


def _choice(spec: Tools, tools: list[dict]) -> str | dict:
    choice = spec.choice
    if isinstance(choice, dict) or choice in ("auto", "required", "none"):
        return choice
    if choice not in {t["function"]["name"] for t in tools}:
        raise ScenarioError(
            [f"workload.tools.choice: {choice!r} is not auto, required, none or a tool's name"]
        )
    return {"type": "function", "function": {"name": choice}}


def _format(spec: ResponseFormat, resolve: Callable[[str], Path]) -> tuple[dict, dict | None]:
    if spec.type == "json_object":
        return {"type": "json_object"}, None
    schema = spec.json_schema
    where = "workload.response_format.schema"
    if spec.schema_file is not None:
        path = resolve(spec.schema_file)
        schema = _read_json(path, "workload.response_format.schema_file")
        where = f"{path}: workload.response_format.schema_file"
    problem = _schema_problem(schema)
    if problem:
        raise ScenarioError([f"{where}: {problem}"])
    assert isinstance(schema, dict)
    return {"type": "json_schema", "json_schema": {"name": spec.name, "schema": schema}}, schema


def _schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a usable JSON Schema (checked with jsonschema when installed)."""
    if not isinstance(schema, dict):
        return "expected a JSON Schema object"
    try:
        from jsonschema import exceptions, validators
    except ImportError:
        return None  # checked by the server alone
    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as exc:
        return f"not a valid JSON Schema: {exc.message}"
    return None


def _read_json(path: Path, field: str) -> Any:
    if not path.exists():
        raise ScenarioError([f"{field}: file not found: {path}"])
    try:
        return json.loads(outside.read_text(path, MAX_CONTENT_FILE_BYTES))
    except OSError as exc:
        raise ScenarioError([f"{path}: {field}: cannot read: {exc.strerror or exc}"]) from None
    except outside.OutsideTextError as exc:
        raise ScenarioError([f"{path}:{exc.line}: {field}: {exc}"]) from None
    except json.JSONDecodeError as exc:
        raise ScenarioError([f"{path}:{exc.lineno}: {field}: not JSON: {exc.msg}"]) from None
    except UnicodeDecodeError:
        raise ScenarioError([f"{path}: {field}: not UTF-8 text"]) from None
