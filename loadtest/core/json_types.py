"""JSON as a type, for the values the package passes on as they were given: a scenario as written,
a request's body, a server's reply, a model's config, an environment manifest. mypy checks them
as JSON (a reader narrows a field before it uses it; nothing but JSON can be put in) and pydantic
validates the same type where a document holds one."""

from __future__ import annotations

from pydantic import JsonValue

JsonObject = dict[str, JsonValue]

__all__ = ["JsonObject", "JsonValue"]
