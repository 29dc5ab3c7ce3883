"""Checks of what a finished stream answered, where the request asked for a form: its tool
calls (arguments that are JSON, and valid against the called tool's schema) and its
structured answer (JSON, valid against the answer's schema). Counted per measured request into
the backend's counters, and summed over workers like them (``summary``)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Protocol

from loadtest.backends.openai.stream import Stream
from loadtest.workload.content import Content


class _Validator(Protocol):
    """A jsonschema validator, as these checks use it."""

    def is_valid(self, instance: object) -> bool: ...


class OutputChecks:
    """Checks answers against ``content``: the tools offered and the answer's format."""

    def __init__(self, content: Content) -> None:
        self.content = content
        self._validators: dict[str, _Validator | None] = {}
        self._schemas = content.tool_schemas

    @property
    def active(self) -> bool:
        return bool(self.content.tools) or self.content.response_format is not None

    def check(self, stream: Stream, facts: Counter) -> None:
        """Count what ``stream``'s answer shows into ``facts``."""
        cut = stream.finish_reason == "length"
        c = self.content
        if c.tools:
            facts["tool_requests"] += 1
            calls = stream.tool_calls
            if calls:
                facts["tool_requests_with_calls"] += 1
            elif c.must_call:
                facts["tool_calls_missing"] += 1
            last = max(calls) if calls else None
            for index, (name, fragments) in sorted(calls.items()):
                facts["tool_calls"] += 1
                facts[self._verdict(name, "".join(fragments), cut and index == last)] += 1
        if c.response_format is not None:
            facts["structured_checked"] += 1
            answer = stream.answer or ""
            facts[self._answer_verdict(answer, cut)] += 1

    def _verdict(self, name: str | None, arguments: str, maybe_cut: bool) -> str:
        schema = self._schemas.get(name or "")
        if schema is None:
            return "tool_calls_unknown_tool"
        return "tool_calls_" + self._judge(name or "", schema, arguments, maybe_cut)

    def _answer_verdict(self, answer: str, cut: bool) -> str:
        schema = self.content.answer_schema
        return "structured_" + self._judge("", schema, answer, cut)

    def _judge(self, key: str, schema: dict | None, text: str, maybe_cut: bool) -> str:
        """ok, bad_json, schema_mismatch, or cut_at_length (the output length ended it:
        incomplete, whatever it holds, so not judged)."""
        if maybe_cut:
            return "cut_at_length"
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # too deep to read is read as not JSON
            return "bad_json"
        if self.content.response_format == {"type": "json_object"} and not key:
            return "ok" if isinstance(value, dict) else "schema_mismatch"
        if schema is None:
            return "ok"
        validator = self._validator(key, schema)
        if validator is None:
            return "ok"  # jsonschema not installed: parsed, not validated (the summary says)
        try:
            return "ok" if validator.is_valid(value) else "schema_mismatch"
        except RecursionError:  # a value too deep for the validator to walk holds no schema's
            return "schema_mismatch"

    def _validator(self, key: str, schema: dict) -> _Validator | None:
        if key not in self._validators:
            try:
                from jsonschema import validators
            except ImportError:
                self._validators[key] = None
            else:
                self._validators[key] = validators.validator_for(schema)(schema)
        return self._validators[key]

    def describe(self) -> dict:
        """What is checked, for the result: the tools offered, the tool_choice, the format."""
        c = self.content
        out: dict = {}
        if c.tools:
            choice = c.tool_choice
            out["tools_offered"] = len(c.tools)
            out["tool_choice"] = (
                choice
                if isinstance(choice, str)
                else str((choice or {}).get("function", {}).get("name"))
            )
        if c.response_format is not None:
            out["format"] = c.response_format["type"]
        return out


def summary(facts: Counter, described: dict) -> dict:
    """The counters and what was checked (``OutputChecks.describe``, and the media sent) as
    the result's ``backend.checks``: the parts of ``ApiResult``."""
    out: dict = {}
    if "tools_offered" in described:
        out["tool_calls"] = {
            "offered": described["tools_offered"],
            "choice": described["tool_choice"],
            "requests": facts["tool_requests"],
            "requests_with_calls": facts["tool_requests_with_calls"],
            "calls": facts["tool_calls"],
            "bad_json": facts["tool_calls_bad_json"],
            "schema_mismatch": facts["tool_calls_schema_mismatch"],
            "unknown_tool": facts["tool_calls_unknown_tool"],
            "cut_at_length": facts["tool_calls_cut_at_length"],
            "missing": facts["tool_calls_missing"],
        }
    if "format" in described:
        out["structured"] = {
            "format": described["format"],
            "checked": facts["structured_checked"],
            "bad_json": facts["structured_bad_json"],
            "schema_mismatch": facts["structured_schema_mismatch"],
            "cut_at_length": facts["structured_cut_at_length"],
        }
    if described.get("media"):
        out["media"] = described["media"]
    return out
