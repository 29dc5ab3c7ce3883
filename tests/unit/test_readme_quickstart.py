"""The README's quickstart runs as pasted, in order: every file it names is shipped, and every
run directory a later line reads (gate, compare, report) an earlier line wrote."""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def quickstart() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Quickstart\n\n```bash\n(.*?)```", text, re.S)
    assert block, "the README has a Quickstart bash block"
    lines = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    return [shlex.split(line) for line in lines if line]


def test_every_line_reads_only_what_is_shipped_or_written_before_it():
    written: set[str] = set()
    for args in quickstart():
        assert args[0] == "loadtest", args
        command, rest = args[1], args[2:]
        for arg in rest:
            if arg.startswith("scenarios/"):
                assert glob.glob(str(ROOT / arg)), f"{arg}: not shipped"
        if "--sla" in rest:
            assert (ROOT / rest[rest.index("--sla") + 1]).is_file(), args
        if command == "run" and "--out" in rest:
            written.add(rest[rest.index("--out") + 1])
        reads = [a for a in rest if a.startswith("reports/")]
        if command in ("gate", "compare", "report"):
            assert reads and all(r in written for r in reads), (args, written)
        if "--baseline" in rest:
            assert rest[rest.index("--baseline") + 1] in written, args
