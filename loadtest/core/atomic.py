"""Atomic file writes: temp file in the same folder, fsync, rename, fsync the folder.

A reader (or a crash) never sees a truncated file: either the old content or the new. Files get
the mode any tool would give them (0666 less the umask), not the temp file's 0600. Every text
written is scrubbed of registered secrets (``loadtest.core.secrets``): this is where results
leave the process.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from loadtest.core import rundir, secrets


def _umask() -> int:
    mask = os.umask(0o022)  # read it (there is no getter); set it straight back
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # read once, at import, before any thread runs


def write_bytes(path: Path, data: bytes) -> None:
    """Write a file atomically (temp file, fsync, rename), honouring the umask."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    rundir.record(path)  # in a run directory: the run wrote it (--overwrite removes it)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_text(path: Path, text: str) -> None:
    """``write_bytes`` of the text, scrubbed of secrets."""
    write_bytes(path, secrets.scrub(text).encode("utf-8"))


def write_json(path: Path, obj: Any) -> None:
    """``write_text`` of the JSON, every string value scrubbed of secrets; NaN refused."""
    write_text(
        path, json.dumps(secrets.scrub_tree(obj), indent=2, sort_keys=False, allow_nan=False) + "\n"
    )


def write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    """``write_text`` of the rows as CSV. A text cell that a spreadsheet would run as a formula
    (starting with = + - @) is prefixed with a quote: outside text stays text."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    write_text(path, buf.getvalue())


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def write_parquet(path: Path, rows: list[dict]) -> bool:
    """``write_bytes`` of the rows as a Parquet table, where pyarrow is installed (False where it
    is not: nothing written). Outside text is scrubbed of secrets as in every other file."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return False
    import io

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(secrets.scrub_tree(rows)), buf)
    write_bytes(path, buf.getvalue())
    return True


def write_jsonl(path: Path, rows: Iterable[Any]) -> None:
    """``write_text`` of one compact JSON object a line."""
    write_text(path, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
