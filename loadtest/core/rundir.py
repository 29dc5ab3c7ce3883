"""Run directories: created before anything heavy starts, never shared, never overwritten.

A run directory is claimed by creating it (or its marker file, when it exists and is empty)
exclusively, so two runs can never write into one directory and a second run can never replace a
first run's result. Default names are made from the scenario name, made safe for a file system,
plus the UTC time, with a counter when two runs start in the same second.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
from pathlib import Path

from loadtest.core.errors import OutputError

MARKER = ".loadtest-run"
RESULT_FILES = ("metrics.json", "sweep.json", "repeat.json", MARKER)
_MAX_NAME = 80


def safe_name(name: str) -> str:
    """A single, portable path component: letters, digits, ``._-``; never ``.``/``..`` or empty."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return cleaned[:_MAX_NAME].rstrip("-.") or "run"


def default_dir(name: str, parent: Path = Path("reports")) -> Path:
    """``reports/<safe name>-<UTC time>``, created now; ``-2``, ``-3``, ... if already taken."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = f"{safe_name(name)}-{stamp}"
    for n in range(1, 10_000):
        path = parent / (base if n == 1 else f"{base}-{n}")
        try:
            _make(path)
            return path
        except FileExistsError:
            continue
    raise OutputError(f"{parent}: could not find a free run directory name for {base}")


def claim(path: Path, overwrite: bool = False) -> Path:
    """Create ``path`` for one run's results, or refuse with a clear reason (``OutputError``).

    An existing empty directory is taken; one that holds an earlier loadtest result is replaced
    only with ``overwrite``; any other existing content is never touched.
    """
    path = Path(path)
    try:
        if path.is_dir() and any(path.iterdir()):
            if not any((path / f).exists() for f in RESULT_FILES):
                raise OutputError(
                    f"{path}: exists and holds other files; choose another output directory"
                )
            if not overwrite:
                raise OutputError(
                    f"{path}: holds an earlier result; choose another output directory "
                    "or pass --overwrite to replace it"
                )
            shutil.rmtree(path)
        if path.is_dir():
            _mark(path)
        else:
            _make(path)
    except FileExistsError:
        raise OutputError(
            f"{path}: another run is using it; choose another output directory"
        ) from None
    except (OSError, ValueError) as exc:  # unwritable, name too long, a NUL in the name, ...
        reason = getattr(exc, "strerror", None) or str(exc)
        raise OutputError(f"{path}: cannot create the output directory: {reason}") from None
    return path


def _make(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir()  # exclusive: FileExistsError when another run got there first
    _mark(path)


def _mark(path: Path) -> None:
    fd = os.open(path / MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    os.close(fd)
