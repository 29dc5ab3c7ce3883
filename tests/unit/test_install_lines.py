"""The name users install by is ours: `loadtest` on the package index is an unrelated 2019
project, so every install line (README, docs, error messages, scenarios, tools) names
`llm-loadtest`, and the package metadata is that name."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
# an install command's arguments, up to the end of its line or a closing quote of prose
INSTALL = re.compile(r"(?:pip|pipx|uv tool|uv pip)\s+install\b([^\n`&;|#]*)")
# a distribution named in them: a word, with extras or a version after it
NAMED = re.compile(r"(?<![-\w./@])(['\"]?)([A-Za-z][\w.-]*)(\[[\w,]+\])?")


def _files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "README.md", "docs", "loadtest", "scenarios", "tools", "docker",
         ".ci"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return [ROOT / f for f in out if f.endswith((".md", ".py", ".yml", ".sh", "Dockerfile", "run"))]


def test_the_distribution_is_named_llm_loadtest():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "llm-loadtest"
    assert meta["project"]["scripts"] == {"loadtest": "loadtest.cli:main"}


def test_no_install_line_names_the_unrelated_loadtest():
    wrong = []
    for path in _files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for args in INSTALL.findall(line):
                names = {m.group(2) for m in NAMED.finditer(args)}
                if "loadtest" in names:
                    wrong.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not wrong, "\n".join(wrong)


def test_the_check_catches_a_line_that_names_it():
    lines = [
        "pip install loadtest",
        "pip install 'loadtest[transformers]'",
        "pipx install loadtest==1.0",
        "uv tool install loadtest",
    ]
    for line in lines:
        (args,) = INSTALL.findall(line)
        assert "loadtest" in {m.group(2) for m in NAMED.finditer(args)}, line
    for fine in ("pip install llm-loadtest", "pip install 'llm-loadtest[otel]'",
                 "pip install -e '.[transformers]'", "pip install torch==2.13.0 -e ."):  # fmt: skip
        (args,) = INSTALL.findall(fine)
        assert "loadtest" not in {m.group(2) for m in NAMED.finditer(args)}, fine
