"""Writing a point's files: metrics.json atomically (kept in the temp folder when its
directory cannot take it), the side files before it and the per-request exports after it. A
file that cannot be written is a warning in the result, never a lost result."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadtest.core import atomic, rundir, secrets
from loadtest.core.errors import LoadtestError
from loadtest.core.text import visible
from loadtest.execution.runner import RunOutcome
from loadtest.results.model import RunMetrics


@dataclass
class RunResult:
    """A finished run: where it was written, and what (``metrics.json`` as a typed model)."""

    out_dir: Path
    result: RunMetrics

    @property
    def metrics(self) -> dict:
        """``metrics.json`` as the JSON-shaped mapping it was written as."""
        return self.result.view()

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def sla_verdict(self) -> str | None:
        return None if self.result.sla is None else self.result.sla.verdict


class ResultWriteError(LoadtestError):
    """The run finished but metrics.json could not be written; ``saved_to`` says where it went."""

    def __init__(self, message: str, saved_to: Path | None) -> None:
        super().__init__(message)
        self.saved_to = saved_to


def write_result(out: Path, result: RunMetrics) -> None:
    """metrics.json, atomically. When that fails (disk full, folder removed), the result is
    kept in the temp folder if possible, and the error says where."""
    doc = result.view()  # written through write_json: every string value is scrubbed of secrets
    try:
        atomic.write_json(out / "metrics.json", doc)
        return
    except OSError as exc:
        problem = f"{out / 'metrics.json'}: could not write the result: {exc.strerror or exc}"
    fallback = (
        Path(tempfile.gettempdir()) / f"loadtest-{rundir.safe_name(out.name)}-{os.getpid()}.json"
    )
    try:
        atomic.write_json(fallback, doc)
    except OSError:
        fallback = None  # type: ignore[assignment]
    raise ResultWriteError(problem, fallback)


def write_side_files(out: Path, t0_ns: int, gpu, server) -> dict[str, str]:
    """gpu.csv and server.csv, written before metrics.json: one that cannot be written (a full
    disk) is a warning in the result, never a lost result. Returns why each failed."""
    writes: list[tuple[str, Callable[[Path], object]]] = []
    if gpu is not None and gpu.rows:
        writes.append(("gpu.csv", lambda p: atomic.write_text(p, gpu.csv_text(t0_ns))))
    if server is not None and server.rows:
        from loadtest.telemetry.server_names import CSV_COLUMNS

        rows = server.csv_rows(t0_ns)
        writes.append(("server.csv", lambda p: atomic.write_csv(p, rows, CSV_COLUMNS)))
    problems = {}
    for name, write in writes:
        try:
            write(out / name)
        except OSError as exc:
            problems[name] = str(exc.strerror or exc)
    return problems


def write_exports(out: Path, result: RunMetrics, outcome: RunOutcome) -> RunMetrics:
    """The per-request exports, after metrics.json; when one cannot be written the result,
    rewritten, says so."""
    records = outcome.recorder.records
    if records is None:
        return result
    problem = _export_files(out, records)
    if not problem:
        return result
    sys.stderr.write(f"loadtest: {visible(secrets.scrub(problem))}\n")
    validity = result.validity.model_copy(update={"warnings": [*result.validity.warnings, problem]})
    result = result.model_copy(update={"validity": validity})
    write_result(out, result)
    return result


def _export_files(out: Path, records: list[dict]) -> str | None:
    """requests.jsonl, .csv and .parquet; why not, when a file cannot be written (a full disk):
    the others are still tried, and metrics.json, written before, says so."""
    columns = [k for k in records[0] if k != "token_ns"] if records else []
    writes: list[tuple[str, Callable[[Path], object]]] = [
        ("requests.jsonl", lambda p: atomic.write_jsonl(p, records)),
        ("requests.csv", lambda p: atomic.write_csv(p, records, columns)),
    ]
    if records:
        writes.append(("requests.parquet", lambda p: atomic.write_parquet(p, records)))
    failed = []
    for name, write in writes:
        try:
            write(out / name)
        except OSError as exc:
            failed.append(f"{name} ({exc.strerror or exc})")
    if not failed:
        return None
    return "the per-request exports could not all be written: " + ", ".join(failed)
