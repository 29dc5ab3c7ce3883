"""The size and typing figures of the code base, as issue-style numbers.

    python tools/house_figures.py            # sizes only (fast)
    python tools/house_figures.py --mypy     # and mypy's findings: --check-untyped-defs, --strict

Counts: modules over 400 lines; classes over 150 lines; function bodies over 40 lines (from the
first statement after the docstring to the last line); string-key reads (`x["key"]` and
`x.get("key")` loads) in the package and in reporters/; annotations naming `Any`, and
`dict[str, Any]` among them; README lines.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE_LINES = 400
BODY_LINES = 40
CLASS_LINES = 150
STRICT_PACKAGES = ("results", "analysis", "reporters", "telemetry")


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
            # a type, not a read: Literal["req"] names a value
            and not (isinstance(node.value, ast.Name) and node.value.id == "Literal")
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


def _annotations(tree: ast.AST) -> list[ast.expr]:
    """Every annotation: arguments, returns, annotated assignments (class fields too)."""
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None and arg.annotation is not None:
                    out.append(arg.annotation)
            if node.returns is not None:
                out.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            out.append(node.annotation)
    return out


def _names_any(annotation: ast.expr) -> bool:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body  # a quoted annotation
    return any(
        (isinstance(n, ast.Name) and n.id == "Any")
        or (isinstance(n, ast.Attribute) and n.attr == "Any")
        for n in ast.walk(annotation)
    )


def main() -> None:
    package = ROOT / "loadtest"
    big_modules: list[tuple[int, str]] = []
    long_functions: list[tuple[int, str]] = []
    reporter_reads = 0
    all_reads = 0
    any_annotations = 0
    dict_str_any = 0
    big_classes: list[tuple[int, str]] = []
    dict_params = 0
    reporter_functions = 0
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        rel = str(path.relative_to(ROOT))
        lines = text.count("\n")
        if lines > MODULE_LINES:
            big_modules.append((lines, rel))
        tree = ast.parse(text)
        all_reads += _string_key_reads(tree)
        for annotation in _annotations(tree):
            if _names_any(annotation):
                any_annotations += 1
        # dict[str, Any] wherever it is written: annotations, and aliases that name it
        dict_str_any += sum(
            ast.unparse(n) == "dict[str, Any]"
            for n in ast.walk(tree)
            if isinstance(n, ast.Subscript)
        )
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > CLASS_LINES:
                    big_classes.append((n, f"{rel}:{node.lineno} {node.name}"))
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
    print(f"classes over {CLASS_LINES} lines: {len(big_classes)}")
    for n, where in sorted(big_classes, reverse=True):
        print(f"  {n:5d}  {where}")
    print(f"function bodies over {BODY_LINES} lines: {len(long_functions)}")
    for n, where in sorted(long_functions, reverse=True)[:10]:
        print(f"  {n:5d}  {where}")
    print(
        f"reporters/: {reporter_reads} string-key reads; {dict_params} of {reporter_functions} functions take a dict"
    )
    print(f"package: {all_reads} string-key reads")
    print(f"annotations naming Any: {any_annotations}; dict[str, Any]: {dict_str_any}")
    print(f"README.md: {readme} lines")
    if "--mypy" in sys.argv:
        findings = _mypy_errors("--check-untyped-defs")
        print(f"mypy --check-untyped-defs: {len(findings)} findings")
        for line in findings[:30]:
            print(f"  {line}")
        errors = _mypy_errors("--strict", "loadtest")
        print(f"mypy --strict: {len(errors)} errors")
        for package in STRICT_PACKAGES:
            n = sum(line.startswith(f"loadtest/{package}/") for line in errors)
            print(f"  {n:5d}  loadtest/{package}/")


def _mypy_errors(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "mypy", *args, "--no-incremental"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    return [line for line in out.splitlines() if ": error:" in line]


if __name__ == "__main__":
    main()
