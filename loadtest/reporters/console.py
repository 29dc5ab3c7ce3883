"""The terminal, made safe for outside text.

Every console loadtest prints to has rich markup off, so a scenario name or a server's error text
such as ``[/]`` is shown as written and can never break the output; loadtest's own colours are
given as ``style=`` or ``Text`` spans. Everything printed passes through the secret scrubber.
"""

from __future__ import annotations

import sys
from typing import IO

from rich.console import Console
from rich.text import Text

from loadtest.core import secrets


class _Scrubbed:
    """A text stream that masks registered secrets in everything written to it."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(secrets.scrub(text))

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def make_console(stderr: bool = False, **kwargs) -> Console:
    """A rich console that never interprets markup in text it prints (outside text stays text)."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(file=_Scrubbed(stream), markup=False, highlight=False, **kwargs)  # type: ignore[arg-type]


def styled(*parts: str | tuple[str, str]) -> Text:
    """``styled("gate: ", ("PASS", "green"))``: plain strings are never parsed for markup."""
    return Text.assemble(*parts)
