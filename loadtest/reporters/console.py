"""The terminal, made safe for outside text.

Every console loadtest prints to has rich markup off, so a scenario name or a server's error text
such as ``[/]`` is shown as written and can never break the output; loadtest's own colours are
given as ``style=`` or ``Text`` spans. Everything printed passes through the secret scrubber.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.text import Text

from loadtest.core import secrets


def make_console(stderr: bool = False, **kwargs: Any) -> Console:
    """A rich console that never interprets markup in text it prints (outside text stays text)."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(file=secrets.scrubbed(stream), markup=False, highlight=False, **kwargs)


def styled(*parts: str | tuple[str, str]) -> Text:
    """``styled("gate: ", ("PASS", "green"))``: plain strings are never parsed for markup."""
    return Text.assemble(*parts)


@contextmanager
def working(what: str) -> Iterator[None]:
    """A transient line on stderr while a long step works (reading many runs, resampling), where
    stderr is a terminal; nothing in a pipe or a CI log."""
    console = make_console(stderr=True)
    if not console.is_terminal:
        yield
        return
    with console.status(what):
        yield
