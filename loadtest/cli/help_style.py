"""How ``--help`` names what an option takes: the words a command-line user reads (TEXT, PATH,
INTEGER, a choice's values), never Python's type names, and nothing after a flag.

typer 0.29 writes each option's Python annotation (``<bool>`` after a flag, ``<list[Path]>``);
a metavar of our own takes its place, read from typer's type descriptor (0.29) or from click's
parameter type (before 0.29, whose options have no descriptor). Set once, on the command classes every command is built
with, so no option can be declared without it.
"""

from __future__ import annotations

import typing
from pathlib import PurePath

import typer.core

WORDS = {str: "TEXT", int: "INTEGER", float: "FLOAT", bool: "BOOL"}


def _metavar(param) -> str:
    """What ``--help`` writes after an option (a flag: nothing) or for an argument."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""  # a flag takes no value: nothing is written after it
    if isinstance(param, typer.core.TyperArgument):
        return (param.name or "value").upper()
    kind = getattr(param, "type_descriptor", None)
    if kind is None:  # typer before 0.29: options carry click's types
        return _click_metavar(getattr(param, "type", None))
    if kind.is_choice:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in kind.choices or ()) + "]"
    if kind.is_path:
        return "PATH"
    annotation = kind.annotation
    if kind.is_list:
        annotation = (typing.get_args(annotation) or (str,))[0]
    if isinstance(annotation, type) and issubclass(annotation, PurePath):
        return "PATH"
    return WORDS.get(annotation, "VALUE") if isinstance(annotation, type) else "VALUE"


# click's type names (``ParamType.name``) as a shell user reads them
CLICK_WORDS = {"integer": "INTEGER", "float": "FLOAT", "text": "TEXT", "boolean": "BOOL"}


def _click_metavar(kind) -> str:
    """The same words from a click parameter type (typer before 0.29 builds options on click)."""
    import click

    if isinstance(kind, click.Choice):
        return "[" + "|".join(str(getattr(c, "value", c)) for c in kind.choices) + "]"
    if isinstance(kind, click.Path | click.File):
        return "PATH"
    return CLICK_WORDS.get(getattr(kind, "name", ""), "VALUE")


def _name_values(params: list) -> list:
    for param in params:
        if isinstance(param, typer.core.TyperArgument):
            # an argument's name is its metavar; typer writes its annotation in a column of its
            # own, which is left empty
            param.metavar = param.metavar or _metavar(param)
            param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
        elif param.metavar is None:
            param.metavar = _metavar(param)
    return params


class Command(typer.core.TyperCommand):
    """A command whose help names values as a shell user reads them (the help option too,
    which is made when the help is)."""

    def get_params(self, ctx):
        return _name_values(super().get_params(ctx))


class Group(typer.core.TyperGroup):
    """The top-level group, the same way (its own options, e.g. --install-completion)."""

    def get_params(self, ctx):
        return _name_values(super().get_params(ctx))
