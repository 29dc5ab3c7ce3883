"""How a figure is shown in a report row: "-" where it was not measured."""

from __future__ import annotations


def text_of(x: object, fmt: str = "{:.3g}") -> str:
    """``x`` in ``fmt`` (3 significant figures), or "-"."""
    return "-" if x is None else fmt.format(x)


def text4(x: float | None) -> str:
    """``x`` to 4 significant figures, or "-"."""
    return "-" if x is None else f"{x:.4g}"


def change_pct(x: float | None) -> str:
    """A change in percent, signed (``+3.2%``), or "-"."""
    return "-" if x is None else f"{x:+.1f}%"
