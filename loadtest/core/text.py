"""Outside text made visible: control characters shown, never obeyed.

A server's model id or error body, a dataset's prompt or a scenario's name can hold terminal
escape sequences (a colour, a cursor move, a clipboard write). Wherever loadtest shows text it
did not write (the terminal, report.md, stderr) it goes through ``visible``: each control
character (but newline and tab) is written out as ``\\x1b``, so what is shown is what was sent.
"""

from __future__ import annotations

import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with every control character but newline and tab written out (``\\x1b``)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def visible_tree(node: Any) -> Any:
    """A copy of a JSON-like tree with every string (keys too) made ``visible``."""
    if isinstance(node, str):
        return visible(node)
    if isinstance(node, dict):
        return {visible_tree(k): visible_tree(v) for k, v in node.items()}
    if isinstance(node, list):
        return [visible_tree(v) for v in node]
    return node


def visible_doc(node: Any) -> Any:
    """``visible_tree`` for typed documents too: a copy of a pydantic model (and what it holds)
    with every string made ``visible``, its types kept."""
    from pydantic import BaseModel

    if isinstance(node, BaseModel):
        names = [*type(node).model_fields, *(node.model_extra or {})]
        changed = {}  # only what escaping changes: the copy keeps which fields were given
        for k in names:
            value = getattr(node, k)
            shown = visible_doc(value)
            if shown != value:
                changed[k] = shown
        return node.model_copy(update=changed) if changed else node
    if isinstance(node, str):
        return visible(node)
    if isinstance(node, dict):
        return {visible_doc(k): visible_doc(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return type(node)(visible_doc(v) for v in node)
    return node
