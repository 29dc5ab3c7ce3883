"""Reading YAML that we did not write: once, fast, and safely.

One parse with libyaml's C composer when it is there (the pure-Python one takes minutes on a large
file), then the node tree is built into Python values here, so that every problem can name its
line: duplicate keys (YAML says they are an error; PyYAML silently keeps the last), alias
expansion past a node budget (a "billion laughs" bomb), nesting too deep, tags outside the safe
set, files too large, binary or not UTF-8. Each is a ``ScenarioError`` naming ``file:line``.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

from loadtest.core.errors import ScenarioError

MAX_BYTES = 4 * 1024 * 1024  # scenarios are a few kB; data sets and traces are separate files
MAX_NODES = 100_000  # values built, aliases counted each time they are used
MAX_DEPTH = 64
_MERGE = "tag:yaml.org,2002:merge"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def decode(raw: bytes, where: str | Path) -> str:
    """The text of a YAML file, or a clear error for one too large, binary or not UTF-8."""
    if len(raw) > MAX_BYTES:
        raise ScenarioError(
            [
                f"{where}:1: the file is {len(raw):,} bytes, over the {MAX_BYTES:,}-byte limit "
                "for a scenario (put large data in a dataset or trace file)"
            ]
        )
    if b"\0" in raw:
        line = raw[: raw.index(b"\0")].count(b"\n") + 1
        raise ScenarioError([f"{where}:{line}: a NUL byte: this is a binary file, not YAML"])
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ScenarioError([f"{where}:{line}: not UTF-8 text (byte {exc.start})"]) from None


def parse(text: str, where: str | Path) -> tuple[object, yaml.Node | None]:
    """``(value, root node)``: the node tree is kept to point errors at their lines."""
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError([f"{where}{line}: YAML error: {problem}"]) from None
    if root is None:
        return None, None
    return _Builder(where).build(root, 0), root


class _Builder:
    def __init__(self, where: str | Path) -> None:
        self.where = where
        self.nodes = 0
        self.scalars = SafeConstructor()

    def fail(self, node: yaml.Node, message: str) -> ScenarioError:
        return ScenarioError([f"{self.where}:{node.start_mark.line + 1}: {message}"])

    def build(self, node: yaml.Node, depth: int) -> object:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(node, f"more than {MAX_NODES:,} values (aliases expanded): refused")
        if depth > MAX_DEPTH:
            raise self.fail(node, f"nested more than {MAX_DEPTH} levels deep: refused")
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, depth)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, depth + 1) for item in node.value]
        try:
            return self.scalars.construct_object(node)
        except ConstructorError as exc:
            raise self.fail(node, f"YAML error: {exc.problem}") from None

    def mapping(self, node: yaml.MappingNode, depth: int) -> dict:
        out: dict = {}
        merged: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:  # `<<: *defaults`: explicit keys win over merged ones
                sources = (
                    value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                )
                for src in sources:
                    value = self.build(src, depth + 1)
                    if not isinstance(value, dict):
                        raise self.fail(src, "YAML error: a merge key (<<) takes mappings")
                    merged = {**value, **merged}
                continue
            key = self.build(key_node, depth + 1)
            if isinstance(key, (dict, list)):
                raise self.fail(key_node, "YAML error: a mapping key must be a plain value")
            if key in out:
                raise self.fail(key_node, f"{key}: duplicate key (the earlier one would be lost)")
            out[key] = self.build(value_node, depth + 1)
        return {**merged, **out}
