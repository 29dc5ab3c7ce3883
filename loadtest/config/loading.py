"""Reading a scenario file: YAML -> ``--set`` overrides -> pydantic -> referenced-file checks.

Every problem becomes one line ``file:line: field.path: message`` (an override's problem names
the ``--set`` it came from), all collected into one :class:`ScenarioError`. Nothing here imports
torch or transformers, so a bad scenario fails in well under a second.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from loadtest.config import yaml_source
from loadtest.config.scenario import Scenario
from loadtest.config.spec import Problem
from loadtest.core import outside
from loadtest.core.errors import ScenarioError


@dataclass(frozen=True)
class LoadedScenario:
    """A validated scenario with the file it came from and the hash of what ran."""

    scenario: Scenario
    path: Path
    sha256: str  # of the file's bytes plus the overrides: identifies what ran

    @property
    def base_dir(self) -> Path:
        """The scenario file's folder: relative paths in it resolve from here."""
        return self.path.parent


def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> LoadedScenario:
    """Read, override (``--set``) and validate a scenario file; every problem as ``file:line: field: message``."""
    path = Path(path)
    try:
        if not path.exists():
            raise ScenarioError([f"{path}: no such file"])
        with outside.open_regular(path) as f:  # a folder, a FIFO or a device: refused
            raw = f.read(yaml_source.MAX_BYTES + 1)
    except outside.OutsideTextError as exc:
        raise ScenarioError([f"{path}: {exc}"]) from None
    except OSError as exc:
        raise ScenarioError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    return parse_scenario(yaml_source.decode(raw, path), path, list(overrides))


def parse_scenario(text: str, path: Path, overrides: list[str]) -> LoadedScenario:
    """Validate a scenario from its parsed mapping, mapping errors back to lines of ``path``."""
    data, root = yaml_source.parse(text, path)
    if not isinstance(data, dict):
        raise ScenarioError(
            [f"{path}:1: the scenario must be a mapping (name:, backend:, load:, ...)"]
        )
    origins = apply_overrides(data, overrides, path)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_describe_errors(exc, root, path, origins)) from None
    base_dir = path.parent
    problems = [
        f"{_where(root, path, loc, origins)}: {'.'.join(map(str, loc))}: {msg}"
        for loc, msg in _preflight(scenario, base_dir)
    ]
    if problems:
        raise ScenarioError(problems)
    digest = hashlib.sha256(text.encode() + "\0".join(overrides).encode()).hexdigest()
    return LoadedScenario(scenario, path.resolve(), digest)


def apply_overrides(data: dict, overrides: Sequence[str], path: Path) -> dict[tuple, str]:
    """Apply ``--set dotted.key=value`` items to a scenario mapping, in order; returns each
    key's override (so an error can name the ``--set`` it came from)."""
    origins: dict[tuple, str] = {}
    for item in overrides:
        key, value = _parse_override(item, path)
        _set_dotted(data, key, value, path, item)
        origins[key] = item
    return origins


def resolve_path(loaded: LoadedScenario, name: str) -> Path:
    """A file the scenario names, relative to the scenario's own folder."""
    p = Path(name).expanduser()
    return p if p.is_absolute() else loaded.base_dir / p


def _preflight(scenario: Scenario, base_dir: Path) -> list[Problem]:
    problems = list(scenario.backend.preflight(base_dir)) + scenario.combination_problems()
    named: list[tuple[tuple, str | None]] = [(("workload", "dataset"), scenario.workload.dataset)]
    if scenario.load.arrival.kind == "trace":
        named.append((("load", "arrival", "file"), scenario.load.arrival.file))
    for loc, name in named:
        if name is None or name.startswith("hf:"):
            continue  # a Hugging Face dataset: a hub id, or a save_to_disk folder, read later
        p = Path(name).expanduser()
        p = p if p.is_absolute() else base_dir / p
        if not p.is_file():
            problems.append((loc, f"file not found: {p}"))
    problems += _open_files_problems(scenario)
    return problems


def _open_files_problems(scenario: Scenario) -> list[Problem]:
    """A closed loop over HTTP holds a connection a user: refused where this host's limit on
    open files (raised to its hard limit) cannot hold them (workers on this host share them;
    Ray workers elsewhere have limits of their own)."""
    from loadtest.core import open_files

    arrival, load = scenario.load.arrival, scenario.load
    cap = getattr(scenario.backend, "max_connections", None)
    if scenario.backend.kind != "openai" or arrival.kind != "concurrency" or load.ray:
        return []
    users = arrival.users
    connections = min(users, cap) if cap else users
    per_process = -(-connections // max(1, load.workers))
    short = open_files.shortfall(per_process)
    if short is None:
        return []
    needed, limit = short
    return [
        (
            ("load", "arrival", "users"),
            f"{users} users hold up to {per_process} connections in a client process, about "
            f"{needed} open files with its own, and this host lets a process open {limit} "
            f"(ulimit -n, at its hard limit): raise the hard limit (ulimit -Hn {needed}), or "
            "use fewer users or more load.workers",
        )
    ]


def _parse_override(item: str, path: Path) -> tuple[tuple, object]:
    if "=" not in item:
        raise ScenarioError([f"--set {item}: expected dotted.key=value"])
    key, raw = item.split("=", 1)
    parts = tuple(int(p) if p.isdigit() else p for p in key.strip().split("."))
    if not key.strip() or "" in parts:
        raise ScenarioError([f"--set {item}: empty key"])
    if not raw.strip():
        return parts, ""
    try:
        value, _ = yaml_source.parse(raw, f"--set {item}")
    except ScenarioError as exc:
        if "YAML error" not in exc.problems[0]:
            raise  # a bomb or a bad tag is refused; plain malformed text is taken as a string
        value = raw
    return parts, value


def _set_dotted(data: dict, key: tuple, value: object, path: Path, item: str) -> None:
    node: dict | list = data
    for i, part in enumerate(key[:-1]):
        nxt = (
            node[part]
            if isinstance(node, list) and isinstance(part, int) and part < len(node)
            else (node.get(part) if isinstance(node, dict) else None)
        )
        if nxt is None:
            if not isinstance(node, dict):
                raise ScenarioError(
                    [f"--set {item}: {'.'.join(map(str, key[: i + 1]))} is not a mapping"]
                )
            nxt = node[part] = {}
        if not isinstance(nxt, (dict, list)):
            raise ScenarioError(
                [f"--set {item}: {'.'.join(map(str, key[: i + 1]))} is a value, not a mapping"]
            )
        node = nxt
    if isinstance(node, list) and isinstance(key[-1], int) and key[-1] < len(node):
        node[key[-1]] = value
    elif isinstance(node, dict):
        node[key[-1]] = value
    else:
        raise ScenarioError([f"--set {item}: cannot set {key[-1]!r} there"])


def _describe_errors(exc: ValidationError, root, path: Path, origins: dict) -> list[str]:
    lines = []
    for err in exc.errors(include_url=False):
        if _is_scalar_branch_noise(err):
            continue
        loc = _user_loc(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see `loadtest validate --help`)"
        elif err["type"] == "missing":
            msg = "required field is missing"
        lines.append(
            f"{_where(root, path, loc, origins)}: {'.'.join(map(str, loc)) or '(top)'}: {msg}"
        )
    return lines


def _is_scalar_branch_noise(err: Mapping) -> bool:
    """``input_tokens: {dist: ...}`` also fails the bare-int branch of the union: not worth saying."""
    scalar_branch = any(
        isinstance(p, str) and (p in ("int", "float", "str") or p.startswith("constrained-"))
        for p in err["loc"]
    )
    return scalar_branch and isinstance(err.get("input"), (dict, list))


def _user_loc(loc: tuple) -> tuple:
    """Drop pydantic's union-branch tags (``'poisson'``, ``'int'``, ``'function-before[...]'``)."""
    out = []
    for part in loc:
        if isinstance(part, str) and (
            part in _BRANCH_TAGS or "[" in part or part.startswith("function-")
        ):
            continue
        out.append(part)
    return tuple(out)


_BRANCH_TAGS = {
    "constant",
    "poisson",
    "gamma",
    "concurrency",
    "burst",
    "trace",
    "fixed",
    "uniform",
    "normal",
    "lognormal",
    "sim",
    "noop",
    "transformers",
    "openai",
    "int",
    "float",
    "str",
    "bool",
    "none",
}


def _where(root, path: Path, loc: tuple, origins: dict) -> str:
    """Where a problem at ``loc`` comes from: the ``--set`` that wrote it (or a field above
    it), else the file's line, naming any ``--set`` inside the field the problem is about
    (``workload: give input_tokens or dataset`` after ``--set workload.dataset=...``)."""
    for n in range(len(loc), 0, -1):
        if loc[:n] in origins:
            return f"--set {origins[loc[:n]]}"
    node, line = root, 1
    for part in loc:  # the deepest node of the path that the file has
        node = _child(node, part)
        if node is None:
            break
        line = node.start_mark.line + 1
    inside = [item for key, item in origins.items() if key[: len(loc)] == tuple(loc)]
    return f"{path}:{line}" + (f" (with --set {', --set '.join(inside)})" if inside else "")


def _child(node, part):
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == str(part):
                # Point at the key itself for a missing/unknown field, at the value otherwise.
                return value if not isinstance(value, yaml.ScalarNode) else key
        return None
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return node.value[part]
    return None
