"""The size and typing figures of the code base, as issue-style numbers.

    python tools/house_figures.py            # sizes only (fast)
    python tools/house_figures.py --mypy     # and mypy's findings with --check-untyped-defs

Counts: modules over 400 lines; function bodies over 40 lines (from the first statement after
the docstring to the last line); string-key reads in reporters/ (`x["key"]` and `x.get("key")`
loads); README lines.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE_LINES = 400
BODY_LINES = 40


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = node.body
    if (
        len(body) > 1
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    return (node.end_lineno or body[-1].lineno) - body[0].lineno + 1


def _string_key_reads(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            count += 1
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            count += 1
    return count


def main() -> None:
    package = ROOT / "loadtest"
    big_modules: list[tuple[int, str]] = []
    long_functions: list[tuple[int, str]] = []
    reporter_reads = 0
    dict_params = 0
    reporter_functions = 0
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        rel = str(path.relative_to(ROOT))
        lines = text.count("\n")
        if lines > MODULE_LINES:
            big_modules.append((lines, rel))
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = _body_lines(node)
                if n > BODY_LINES:
                    long_functions.append((n, f"{rel}:{node.lineno} {node.name}"))
                if "reporters" in path.parts:
                    reporter_functions += 1
                    annotations = [a.annotation for a in node.args.args if a.annotation]
                    if any("dict" in ast.unparse(a) for a in annotations):
                        dict_params += 1
        if "reporters" in path.parts:
            reporter_reads += _string_key_reads(tree)
    readme = (ROOT / "README.md").read_text().count("\n")
    print(f"modules over {MODULE_LINES} lines: {len(big_modules)}")
    for lines, rel in sorted(big_modules, reverse=True):
        print(f"  {lines:5d}  {rel}")
    print(f"function bodies over {BODY_LINES} lines: {len(long_functions)}")
    for n, where in sorted(long_functions, reverse=True)[:10]:
        print(f"  {n:5d}  {where}")
    print(
        f"reporters/: {reporter_reads} string-key reads; {dict_params} of {reporter_functions} functions take a dict"
    )
    print(f"README.md: {readme} lines")
    if "--mypy" in sys.argv:
        out = subprocess.run(
            [sys.executable, "-m", "mypy", "--check-untyped-defs", "--no-incremental"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout
        findings = [line for line in out.splitlines() if ": error:" in line]
        print(f"mypy --check-untyped-defs: {len(findings)} findings")
        for line in findings[:30]:
            print(f"  {line}")


if __name__ == "__main__":
    main()
