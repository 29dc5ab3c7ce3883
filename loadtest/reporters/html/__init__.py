"""``report.html``, ``sweep.html`` and ``compare.html``: one self-contained file each (inline CSS,
inline SVG plots, a small inline script; nothing fetched).

The page is a verdict strip (the answer first), then sections. With JavaScript on, the sections
are tabs and the plots' markers show their exact values on hover; with it off, or printed, every
section is shown in order and the markers' SVG titles still give the values. Every piece of text
that could come from a user, a prompt, a server or a dataset goes through ``esc``.
"""

from loadtest.reporters.html.compare import compare_html
from loadtest.reporters.html.page import esc
from loadtest.reporters.html.repeat import repeat_html
from loadtest.reporters.html.run import run_html, run_strip, sla_html, write_run
from loadtest.reporters.html.sweep import sweep_html

__all__ = [
    "compare_html",
    "esc",
    "repeat_html",
    "run_html",
    "run_strip",
    "sla_html",
    "sweep_html",
    "write_run",
]
