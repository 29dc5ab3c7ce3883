"""Run directories: created before anything heavy starts, never shared, never overwritten.

A run directory is claimed by creating it (or its marker file, when it exists and is empty)
exclusively, so two runs can never write into one directory and a second run can never replace a
first run's result. Default names are made from the scenario name, made safe for a file system,
plus the UTC time, with a counter when two runs start in the same second.

The marker is the run's own record: every file a run writes there (and every run directory it
makes inside, a sweep's points) is added to it, a name a line, and the run holds a lock on it
while it runs. ``--overwrite`` removes exactly what the marker lists, and only from a directory
that has one and that no live run holds: a user's own files beside a result are never touched.
"""

from __future__ import annotations

import atexit
import datetime as dt
import fcntl
import os
import re
import shutil
from pathlib import Path

from loadtest.core.errors import OutputError

MARKER = ".loadtest-run"
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
        except OSError as exc:  # a read-only folder, a full disk: said, not a traceback
            raise OutputError(
                f"{path}: cannot create the run directory: {exc.strerror or exc} "
                "(give --out DIR somewhere writable)"
            ) from None
    raise OutputError(f"{parent}: could not find a free run directory name for {base}")


def claim(path: Path, overwrite: bool = False) -> Path:
    """Create ``path`` for one run's results, or refuse with a clear reason (``OutputError``).

    An existing empty directory is taken; one that holds an earlier loadtest run's result has
    what that run wrote removed, only with ``overwrite`` and only when no run is writing there
    now; any other existing content is never touched.
    """
    path = Path(path)
    try:
        if path.exists() and not path.is_dir():
            raise OutputError(
                f"{path}: is a file, not a directory; choose another output directory"
            )
        if path.is_dir() and {p.name for p in path.iterdir()} == {MARKER}:
            # a run claimed it and wrote nothing (it crashed, or was killed): nothing to keep,
            # nothing to overwrite; taken as empty, unless that run is still alive
            _remove_run(path)
        if path.is_dir() and any(path.iterdir()):
            if not (path / MARKER).is_file():
                raise OutputError(
                    f"{path}: exists and holds files no loadtest run wrote; choose another "
                    "output directory"
                )
            if not overwrite:
                raise OutputError(
                    f"{path}: holds an earlier result; choose another output directory "
                    "or pass --overwrite to replace it"
                )
            _remove_run(path)
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


def record(path: Path) -> None:
    """Note, in the marker of the run directory ``path`` is in, that a run wrote it (nothing
    where the folder is no run directory). Never raises: on a full disk the file is written
    and only this note of it is lost (``--overwrite`` then leaves that file to be replaced)."""
    name = Path(path).name
    if not name or "\n" in name or name == MARKER:
        return
    try:
        fd = os.open(Path(path).parent / MARKER, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return
    try:
        os.write(fd, (name + "\n").encode("utf-8", "surrogateescape"))
    except OSError:
        pass
    finally:
        os.close(fd)


def _release(path: Path) -> None:
    """The run is done with ``path``: its lock goes (a later run may overwrite it)."""
    fd = _held.pop(Path(path).resolve(), None)
    if fd is not None:
        os.close(fd)


_held: dict[Path, int] = {}  # run directories this process is writing: their locked markers


def _make(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir()  # exclusive: FileExistsError when another run got there first
    _made.add(path.resolve())
    _mark(path)


_made: set[Path] = set()  # run directories this process created (not a user's empty folder)


@atexit.register
def discard_unused() -> None:
    """At exit, a run directory this process claimed and wrote nothing into (a crash before
    its first file) is not left behind holding only its marker: the marker goes, and the
    folder too where this process made it."""
    for path in list(_held):
        try:
            if {p.name for p in path.iterdir()} != {MARKER}:
                continue
            _release(path)
            (path / MARKER).unlink()
            if path in _made:
                path.rmdir()
        except OSError:
            continue


def _mark(path: Path) -> None:
    fd = os.open(path / MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held while this process writes the run: never taken over
    _held[path.resolve()] = fd
    record(path)  # a run directory made inside another (a sweep's point) is that run's


def _remove_run(path: Path) -> None:
    """Remove what the run in ``path`` wrote, as its marker lists it, then the marker."""
    marker = path / MARKER
    if path.resolve() in _held:
        _release(path)  # this process's own earlier run, finished
    fd = os.open(marker, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputError(
                f"{path}: a loadtest run is writing there now; choose another output directory"
            ) from None
        names = set(marker.read_text(encoding="utf-8", errors="surrogateescape").splitlines())
        others = {p.name for p in path.iterdir()} - names - {MARKER}
        if not names and others:
            raise OutputError(
                f"{path}: its marker lists nothing it wrote (an older loadtest made it): "
                "remove what you do not want, then run again"
            )
        for name in sorted(names - {"", ".", "..", MARKER}):
            if "/" not in name:  # a name in this folder, never a path out of it
                _remove_written(path / name)
        marker.unlink()
    finally:
        os.close(fd)


def _remove_written(p: Path) -> None:
    """Remove one thing a marker lists: a file, a folder the run made, a run directory."""
    if p.is_symlink():
        p.unlink()
    elif p.is_dir():
        if (p / MARKER).is_file():
            _remove_run(p)
            try:
                p.rmdir()  # emptied, unless a user's files are in it
            except OSError:
                pass
        else:  # a folder the run made for its own files (the profiler's tb/)
            shutil.rmtree(p)
    elif p.exists():
        p.unlink()
