"""The wheel carries what the package opens at run time, its licence and one version.

Every file the code names through ``importlib.resources`` and every non-Python file kept under
``loadtest/`` must be in the built wheel: an editable install finds them in the checkout, an
installed one only where the wheel put them (the corpus was missing once: every installed
``--url`` run crashed). tools/check_installed.sh runs the installed wheel end to end (CI)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "loadtest"
RESOURCE = re.compile(r'resources\.files\("([\w.]+)"\)\.joinpath\("([^"]+)"\)')


def _named_resources() -> set[str]:
    """Files the code opens through importlib.resources, as wheel paths."""
    out = set()
    for source in PACKAGE.rglob("*.py"):
        for package, name in RESOURCE.findall(source.read_text()):
            out.add(f"{package.replace('.', '/')}/{name}")
    return out


def _tracked_data() -> set[str]:
    files = subprocess.run(
        ["git", "ls-files", "loadtest"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return {f for f in files if not f.endswith(".py")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    # as a release is built: the sdist first, the wheel from the sdist (a file the sdist
    # leaves out is in neither, though a wheel built straight from the checkout has it)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "build", "-q", "--outdir", str(out), str(ROOT)],
                   check=True, timeout=300, capture_output=True)  # fmt: skip
    return zipfile.ZipFile(next(out.glob("llm_loadtest-*.whl")))


def test_the_code_names_its_resources_and_the_checkout_has_them():
    named = _named_resources()
    assert "loadtest/workload/data/corpus.txt.gz" in named  # the scan finds what it must
    assert all((ROOT / n).is_file() for n in named), named


def test_the_wheel_carries_every_file_the_package_opens_and_every_module(wheel):
    names = set(wheel.namelist())
    modules = {str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")}
    missing = (_named_resources() | _tracked_data() | modules) - names
    assert not missing, sorted(missing)


def test_the_wheel_states_its_licence_and_the_one_version(wheel):
    from loadtest.core._version import __version__

    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    text = wheel.read(meta).decode()
    assert f"\nVersion: {__version__}\n" in text
    assert "\nLicense-Expression: Apache-2.0\n" in text
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in wheel.namelist())


def test_every_data_file_is_declared_package_data_whatever_setuptools_adds_by_itself():
    # recent setuptools puts a package folder's data files in the sdist by itself, older ones
    # (which pip may pick within the build requirement's range) do not: only a declaration
    # holds for all of them
    import fnmatch

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]
    for path in _named_resources() | _tracked_data():
        package, _, name = path.rpartition("/")
        owners = [p for p in declared if path.startswith(p.replace(".", "/") + "/")]
        assert any(
            fnmatch.fnmatch(path.removeprefix(p.replace(".", "/") + "/"), glob)
            for p in owners
            for glob in declared[p]
        ), f"{path} is not declared package data"
