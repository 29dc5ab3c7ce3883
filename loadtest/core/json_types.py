"""JSON as a type, for the values the package passes on as they were given: a scenario as written,
a request's body, a server's reply, a model's config, an environment manifest. mypy checks them
as JSON (a reader narrows a field before it uses it; nothing but JSON can be put in) and pydantic
validates the same type where a document holds one."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import JsonValue

JsonObject = dict[str, JsonValue]

__all__ = ["JsonObject", "JsonValue"]


def number_in(obj: JsonObject, key: str, default: float = 0.0) -> float:
    """``obj[key]`` where it is a number (a bool is not), else ``default``."""
    value = obj.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return default


def text_in(obj: JsonObject, key: str) -> str | None:
    """``obj[key]`` where it is a string, else None."""
    value = obj.get(key)
    return value if isinstance(value, str) else None


def object_in(obj: JsonObject, key: str) -> JsonObject:
    """``obj[key]`` where it is an object, else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def json_list(items: Iterable[JsonValue]) -> list[JsonValue]:
    """``items`` as a JSON array (a ``list[str]`` is one, but mypy's lists are invariant)."""
    return list(items)


def ints_in(obj: JsonObject, key: str) -> list[int] | None:
    """``obj[key]`` where it is an array of integers, else None."""
    value = obj.get(key)
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return [v for v in value if isinstance(v, int)]
    return None
