"""Trace replay: requests read from a trace file, with their send times and, in the public trace
formats, their lengths and shared prefixes.

Formats (``load.arrival.format``):

- ``offsets``: one number of seconds a line, or JSONL with an ``offset`` key (``#`` comments);
  send times only, as written.
- ``mooncake``: Mooncake's JSONL, ``{"timestamp": ms, "input_length": n, "output_length": n,
  "hash_ids": [...]}``. Each hash id names a block of ``block_tokens`` (512) prompt tokens; two
  requests whose ``hash_ids`` start alike share exactly those blocks' text, so a server's prefix
  cache sees what the trace's users caused.
- ``burstgpt``: BurstGPT's CSV (``Timestamp`` in seconds, ``Request tokens``, ``Response
  tokens``; ``Model`` and ``Log Type`` are not used).
- ``azure``: the Azure LLM inference trace CSV (``TIMESTAMP`` as a date and time,
  ``ContextTokens``, ``GeneratedTokens``).

The public formats' times are replayed from their first row (offset 0). A length of 0 (BurstGPT
logs failed requests with no response) is sent as 1: a request asks for one token at least.
The file is read as the plan consumes it, so a long trace cut by ``duration`` or ``requests`` is
read only as far as the window goes, and a trace longer than ``max_planned_requests`` is refused
at the row that crosses it.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from loadtest.config.arrivals import TraceArrival
from loadtest.core import outside
from loadtest.core.clock import NS_PER_S
from loadtest.core.errors import ScenarioError

MAX_TRACE_S = 366 * 86400  # a trace longer than a year is no load test: refused by line
MAX_TRACE_TOKENS = 10_000_000  # per request, as the workload's lengths
MAX_BLOCKS = 100_000  # hash ids a request may name
MAX_LINE_BYTES = 16 << 20  # of one line of a trace: a file with no newline is not read whole


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace: when (seconds from the trace's start, unscaled), and what."""

    seconds: float
    input_tokens: int | None = None
    output_tokens: int | None = None
    blocks: tuple[int, ...] | None = None  # mooncake: the hash ids of its prompt's blocks


class TraceRowError(ValueError):
    """A row that cannot be read: what is wrong, and with which field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


@dataclass
class Trace:
    """A trace replayed: its offsets (ns from t0, scaled) in order, and each request's row as
    the offsets are drawn (``rows[i]`` is the i-th request's)."""

    path: Path
    spec: TraceArrival
    max_rows: int
    rows: list[TraceRow] = field(default_factory=list)
    _scale: float | None = None

    def offsets_ns(self, rng=None) -> Iterator[int]:
        scale = self.scale()
        previous = 0
        for lineno, row in self._read():
            if len(self.rows) >= self.max_rows:
                raise ScenarioError(
                    [
                        f"{self.path}:{lineno}: the trace holds more than {self.max_rows:,} "
                        "requests: give load.duration or load.requests to replay part of it, or "
                        "raise load.max_planned_requests"
                    ]
                )
            ns = round(row.seconds * scale * NS_PER_S)
            if ns < previous:
                raise ScenarioError(
                    [f"{self.path}:{lineno}: {self._time_field}: times must not go backwards"]
                )
            previous = ns
            self.rows.append(row)
            yield ns
        if not self.rows:
            raise ScenarioError([f"{self.path}:1: {self._time_field}: the trace holds no requests"])

    def scale(self) -> float:
        """What every time is multiplied by: ``time_scale``, or what makes the mean rate
        ``rate`` (the trace's requests spread over count/rate seconds); read once."""
        if self._scale is None:
            self._scale = self.spec.time_scale
            if self.spec.rate is not None:
                count, first, last = 0, None, 0.0
                for _, row in self._read():
                    first = row.seconds if first is None else first
                    last, count = row.seconds, count + 1
                if count < 2 or first is None or last <= first:
                    raise ScenarioError(
                        [
                            f"{self.path}:1: rate: replaying at a rate needs a trace of two "
                            "requests at least, at different times"
                        ]
                    )
                self._scale = count / self.spec.rate / (last - first)
        return self._scale

    @property
    def _time_field(self) -> str:
        return {"offsets": "offset", "mooncake": "timestamp", "burstgpt": "Timestamp"}.get(
            self.spec.format, "TIMESTAMP"
        )

    def _read(self) -> Iterator[tuple[int, TraceRow]]:
        """(line number, row) for each request, times from the first row's (but ``offsets``,
        as written)."""
        fmt = self.spec.format
        rows = (
            _offsets(self)
            if fmt == "offsets"
            else _mooncake(self)
            if fmt == "mooncake"
            else _csv(self)
        )
        first = None
        for lineno, row in rows:
            if fmt != "offsets":
                first = row.seconds if first is None else first
                row = TraceRow(row.seconds - first, row.input_tokens, row.output_tokens, row.blocks)
            if (
                not math.isfinite(row.seconds)
                or not 0 <= row.seconds * self.spec.time_scale <= MAX_TRACE_S
            ):
                raise ScenarioError(
                    [f"{self.path}:{lineno}: {self._time_field}: out of range ({row.seconds!r} s)"]
                )
            yield lineno, row


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's lines, numbered, read as they are needed (each decoded on its own, so a
    line that is not UTF-8 is named by its own number)."""
    try:
        with outside.open_regular(path) as f:
            for lineno in itertools.count(1):
                raw = f.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    return
                if len(raw) > MAX_LINE_BYTES:
                    raise ScenarioError(
                        [f"{path}:{lineno}: a line over {MAX_LINE_BYTES:,} bytes; not read"]
                    )
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise ScenarioError(
                        [f"{path}:{lineno}: not UTF-8 text (a binary file?)"]
                    ) from None
                yield lineno, line
    except outside.OutsideTextError as exc:
        raise ScenarioError([f"{path}:1: cannot read the trace: {exc}"]) from None
    except OSError as exc:
        raise ScenarioError([f"{path}:1: cannot read the trace: {exc.strerror}"]) from None


def _offsets(trace: Trace) -> Iterator[tuple[int, TraceRow]]:
    for lineno, line in _lines(trace.path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            value = outside.loads(line)
            seconds = float(value["offset"] if isinstance(value, dict) else value)
        except (ValueError, KeyError, TypeError):
            raise ScenarioError(
                [
                    f'{trace.path}:{lineno}: offset: expected seconds or {{"offset": seconds}}, '
                    f"got {line[:60]!r}"
                ]
            ) from None
        yield lineno, TraceRow(seconds)


def _mooncake(trace: Trace) -> Iterator[tuple[int, TraceRow]]:
    for lineno, line in _lines(trace.path):
        line = line.strip()
        if not line:
            continue
        try:
            try:
                value = outside.loads(line)
            except ValueError:
                raise TraceRowError("line", f"not a JSON object: {line[:60]!r}") from None
            if not isinstance(value, dict):
                raise TraceRowError("line", f"not a JSON object: {line[:60]!r}")
            seconds = _number(value, "timestamp") / 1000.0
            n_in = _tokens(value, "input_length")
            n_out = _tokens(value, "output_length")
            blocks = value.get("hash_ids", [])
            if not isinstance(blocks, list) or not all(
                isinstance(h, int) and not isinstance(h, bool) for h in blocks
            ):
                raise TraceRowError("hash_ids", "expected a list of integers")
            if len(blocks) > MAX_BLOCKS:
                raise TraceRowError("hash_ids", f"more than {MAX_BLOCKS:,} blocks")
        except TraceRowError as exc:
            raise ScenarioError([f"{trace.path}:{lineno}: {exc.field}: {exc}"]) from None
        yield lineno, TraceRow(seconds, n_in, n_out, tuple(blocks))


CSV_FIELDS = {  # format -> (time, input tokens, output tokens)
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
}


def _csv(trace: Trace) -> Iterator[tuple[int, TraceRow]]:
    t_field, in_field, out_field = CSV_FIELDS[trace.spec.format]
    numbered = ((lineno, line) for lineno, line in _lines(trace.path) if line.strip())
    tracker = [0]  # the line csv.reader last took (its own count skips nothing blank)
    rows = csv.reader(_track(numbered, tracker))
    try:
        header = [h.strip() for h in next(rows)]
    except StopIteration:
        raise ScenarioError([f"{trace.path}:1: {t_field}: the trace is empty"]) from None
    header_line = tracker[0]
    missing = [f for f in (t_field, in_field, out_field) if f not in header]
    if missing:
        raise ScenarioError(
            [
                f"{trace.path}:{header_line}: {missing[0]}: not a column of this "
                f"{trace.spec.format} trace (its header: {', '.join(header)[:200]})"
            ]
        )
    at = {name: header.index(name) for name in (t_field, in_field, out_field)}
    for cells in rows:
        lineno = tracker[0]
        try:
            record = {name: cells[i] if i < len(cells) else "" for name, i in at.items()}
            seconds = (
                _azure_time(record[t_field])
                if trace.spec.format == "azure"
                else _number(record, t_field)
            )
            n_in, n_out = _tokens(record, in_field), _tokens(record, out_field)
        except TraceRowError as exc:
            raise ScenarioError([f"{trace.path}:{lineno}: {exc.field}: {exc}"]) from None
        yield lineno, TraceRow(seconds, n_in, n_out)


def _track(numbered: Iterator[tuple[int, str]], tracker: list[int]) -> Iterator[str]:
    for tracker[0], line in numbered:
        yield line


def _number(record: dict, name: str) -> float:
    value = record.get(name)
    if isinstance(value, str):
        text = value
        try:
            value = float(text)
        except ValueError:
            raise TraceRowError(name, f"expected a number, got {text[:40]!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceRowError(name, f"expected a number, got {str(value)[:40]!r}")
    return float(value)


def _tokens(record: dict, name: str) -> int:
    """A token count: a whole number from 0 to the limit; 0 is sent as 1."""
    value = _number(record, name)
    if value != int(value) or not 0 <= value <= MAX_TRACE_TOKENS:
        raise TraceRowError(
            name, f"expected a whole number of tokens from 0 to {MAX_TRACE_TOKENS:,}, got {value:g}"
        )
    return max(1, int(value))


def _azure_time(text: str) -> float:
    """Seconds since the epoch of the Azure trace's ``2023-11-16 18:15:46.6805900`` (seven
    fractional digits, which ``datetime`` does not read before Python 3.11)."""
    whole, _, fraction = text.strip().partition(".")
    try:
        stamp = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
        frac = float(f"0.{fraction}") if fraction else 0.0
    except ValueError:
        raise TraceRowError(
            "TIMESTAMP",
            f"expected a date and time such as 2023-11-16 18:15:46.68, got {text[:40]!r}",
        ) from None
    return stamp.timestamp() + frac


def prefix_reuse(requests: Iterable, block_tokens: int) -> float | None:
    """The share of the measured requests' prompt tokens that an earlier request (warm-up
    included) sent as the same prefix: what a prefix cache with room for everything would hit,
    replaying the trace in order. None when no request names blocks."""
    # A chain of blocks is named by its parent chain's number and its last block, so the map
    # grows by one entry a block: keyed by the chains themselves it grew with the square of a
    # request's block count (a 20,000-block row took gigabytes).
    number: dict[tuple[int, int], int] = {}  # (parent chain, block) -> this chain's number
    seen: dict[int, int] = {}  # a chain's number -> tokens of its last block sent
    hit = total = 0
    for r in requests:
        if not r.blocks:
            continue
        chain_hit = True
        chain = -1  # the empty chain
        for i, block in enumerate(r.blocks):
            length = min(block_tokens, r.input_tokens - i * block_tokens)
            if length <= 0:
                break
            chain = number.setdefault((chain, block), len(number))
            before = seen.get(chain, 0)
            if not r.warmup:
                hit += min(length, before) if chain_hit else 0
            chain_hit = chain_hit and before >= length
            seen[chain] = max(before, length)
        if not r.warmup:
            total += r.input_tokens
    return None if total == 0 else hit / total
