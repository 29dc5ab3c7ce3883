"""A saved run, or a set of replicated runs (``run --repeat``), read back from disk.

A run directory holds ``metrics.json``; a repeat directory holds ``repeat.json`` naming its
replicate run directories. ``gate`` and ``compare`` take either. Every file is read through its
typed model (``results.model``), so a foreign or broken file is a clear usage error. The pooled
view merges the replicates' histograms (hdrh merges losslessly) and counts, so SLA checks on a
repeat set use all of its samples as evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from loadtest.core.histogram import LatencyHistogram
from loadtest.results.model import RepeatDoc, ResultReadError, RunMetrics, read_repeat, read_run
from loadtest.results.stability import SHORTFALL

REPEAT_FILE = "repeat.json"
_STATUS_ORDER = ("failed", "interrupted", "invalid", "ok")  # the pooled status is the worst


class RunSetError(Exception):
    """A run or repeat directory that cannot be read (a usage error)."""

    pass


@dataclass(frozen=True)
class ClientShare:
    """What of a run's figures may be the client's own (ms): the latest send's lateness (any
    latency from the intended send may hold up to it), how late a token's stamp may be for the
    client's own loop (its lag histogram, where this client stamps the tokens: None where the
    engine stamps them; ``stamp_delay_ms`` its p99, or all that older results kept), and its
    own failures (it ran out of file descriptors). ``held``: sends waited for what the
    scenario set (an in-flight cap's slot, a max_rate ceiling), a wait that is the figure's,
    not the client's, and that a service-time figure leaves out. Replicates: the worst of
    each, the lags merged, the failures summed."""

    dispatch_max_ms: float = 0.0
    stamp_delay_ms: float = 0.0
    failed: int = 0
    lag: LatencyHistogram | None = field(default=None, compare=False)
    held: bool = False

    @classmethod
    def of_run(cls, result: RunMetrics) -> ClientShare:
        dispatch = result.latency_ms.get("dispatch_lag") if result.latency_ms else None
        harness, lag = result.harness, None
        stamp = 0.0
        if harness is not None:  # older results said nothing of where stamps are taken
            known = harness.stamp_delay_ms
            stamp = known if known is not None else (harness.loop_lag_ms.p99 or 0.0)
            if known and result.loop_lag_histogram:
                lag = LatencyHistogram.decode(result.loop_lag_histogram)
        failed = sum(
            n for kind, n in result.requests.errors_by_type.items() if kind.startswith("client_")
        )
        slot = result.latency_ms.get("slot_wait") if result.latency_ms else None
        held = bool((harness and harness.throttled_requests) or (slot and slot.max))
        return cls((dispatch.max or 0.0) if dispatch else 0.0, stamp, failed, lag, held)

    def worst(self, other: ClientShare) -> ClientShare:
        lag = None
        if self.lag is not None or other.lag is not None:
            lag = LatencyHistogram()
            for part in (self.lag, other.lag):
                if part is not None:
                    lag.add(part)
        return ClientShare(
            max(self.dispatch_max_ms, other.dispatch_max_ms),
            max(self.stamp_delay_ms, other.stamp_delay_ms),
            self.failed + other.failed,
            lag,
            self.held or other.held,
        )

    def stamp_at(self, pct: float) -> float:
        """The stamp delay at ``pct`` of the loop's lag (the p99 figure where none is kept)."""
        if self.lag is None or not self.lag.count:
            return self.stamp_delay_ms
        return self.lag.percentile_ms(pct)

    def delays(self) -> list[tuple[float, float]]:
        """``(share %, delay ms)`` pairs: at most ``share`` per cent of stamps were later than
        ``delay`` (the loop's lag at a few ranks, then its maximum); one pair, (0, the p99
        figure), where no lag histogram is kept."""
        if self.lag is None or not self.lag.count:
            return [(0.0, self.stamp_delay_ms)]
        return [(100.0 - r, self.lag.percentile_ms(r)) for r in STAMP_RANKS]


# ranks of the loop's lag each end of a figure is tried at (100: its maximum)
STAMP_RANKS = (50.0, 90.0, 99.0, 99.9, 100.0)


@dataclass
class Evidence:
    """What SLA checks judge: one run, or replicates as one (the worst status, every reason,
    merged histograms, summed counts, rates over the summed windows)."""

    status: str
    reasons: list[str]
    histograms: dict[str, LatencyHistogram] | None  # None: nothing was measured
    completed: int = 0
    failed: int = 0
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    window_s: float | None = None
    # False when any run was overloaded; None when any is unknown or none was judged
    steady: bool | None = None
    # some run delivered under 95% of its offered rate (overloaded, or too few to tell)
    short_delivery: bool = False
    client: ClientShare = field(default_factory=ClientShare)
    # every invalid run is invalid only for the client's own lateness (the checks count it)
    client_lateness_only: bool = False
    # a model mix: each model's own evidence (its histograms and counts)
    by_model: dict[str, Evidence] = field(default_factory=dict)
    # answers: compared with their references, and matched (None: not checked)
    answers: tuple[int, int] | None = None

    @classmethod
    def of_run(cls, result: RunMetrics) -> Evidence:
        """One run's evidence: its own histograms, counts and rates."""
        return RunSet(Path("."), [result], [""]).pooled()


@dataclass
class RunSet:
    """A run directory, or a repeat directory's replicates, read back through the typed models."""

    path: Path
    results: list[RunMetrics]  # each replicate's metrics.json
    labels: list[str]  # each replicate's directory name, for its reasons
    repeat: RepeatDoc | None = None  # repeat.json, for a repeat directory

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def measured(self) -> list[RunMetrics]:
        """The replicates that measured something (a run that failed to start did not)."""
        return [r for r in self.results if r.measured]

    def pooled(self) -> Evidence:
        """The replicates as one piece of evidence."""
        measured = [r for r in self.results if r.measured]
        status = min((r.status for r in self.results), key=_STATUS_ORDER.index)
        many = len(self.results) > 1
        reasons = [
            f"{label}: {reason}" if many else reason
            for r, label in zip(self.results, self.labels)
            for reason in r.validity.reasons
        ]
        if not measured:
            return Evidence(status, reasons, None)
        hists: dict[str, LatencyHistogram] = {}
        for r in measured:
            over = r.histograms_over_range or {}
            for name, text in (r.histograms or {}).items():
                h = LatencyHistogram.decode(text, over.get(name, 0))
                hists.setdefault(name, LatencyHistogram()).add(h)
        window = sum((r.throughput.window_s or 0) for r in measured if r.throughput)
        tokens = sum(r.throughput.output_tokens_in_window for r in measured if r.throughput)
        done = sum(
            (r.throughput.requests_per_s or 0) * (r.throughput.window_s or 0)
            for r in measured
            if r.throughput
        )
        if not many:  # one run: its own figures exactly, not recomputed
            t = measured[0].throughput
            otps, rps = (t.output_tokens_per_s, t.requests_per_s) if t else (None, None)
        else:
            otps, rps = (tokens / window, done / window) if window else (None, None)
        judged = [r.stability for r in measured if r.stability is not None]
        steady = [j.steady for j in judged]
        client = ClientShare()
        for r in measured:
            client = client.worst(ClientShare.of_run(r))
        invalid = [r for r in self.results if r.status == "invalid"]
        by_model: dict[str, Evidence] = {}
        for r in measured:
            for model, m in ((r.traffic.models or {}) if r.traffic else {}).items():
                ev = by_model.setdefault(model, Evidence(status, [], {}))
                for metric, text in m.histograms.items():
                    h = LatencyHistogram.decode(text)
                    ev.histograms.setdefault(metric, LatencyHistogram()).add(h)  # type: ignore[union-attr]
                ev.completed += m.completed
                ev.failed += m.failed
        return Evidence(
            status,
            reasons,
            hists,
            steady=False if False in steady else (None if None in steady or not steady else True),
            short_delivery=any(
                j.delivered_fraction is not None and j.delivered_fraction < 1 - SHORTFALL
                for j in judged
            ),
            window_s=window or None,
            client=client,
            client_lateness_only=bool(invalid)
            and all(r.validity.client_lateness_only for r in invalid),
            completed=sum(r.requests.completed for r in measured),
            failed=sum(r.requests.failed for r in measured),
            output_tokens_per_s=otps,
            requests_per_s=rps,
            by_model=by_model,
            answers=_answers(measured),
        )


def _answers(measured: list[RunMetrics]) -> tuple[int, int] | None:
    """The replicates' answers compared and matched, summed (None: none checked them)."""
    checked = [r.answers for r in measured if r.answers is not None]
    if not checked:
        return None
    return sum(a.compared for a in checked), sum(a.matched for a in checked)


def load(path: str | Path) -> RunSet:
    """Read a run directory (metrics.json) or a repeat directory (repeat.json and its runs)."""
    path = Path(path)
    try:
        if (path / REPEAT_FILE).exists():
            repeat = read_repeat(path / REPEAT_FILE)
            return RunSet(path, [_read(path / d) for d in repeat.runs], list(repeat.runs), repeat)
        return RunSet(path, [_read(path)], [path.name])
    except ResultReadError as exc:
        raise RunSetError(str(exc)) from None


def _read(run_dir: Path) -> RunMetrics:
    if not (run_dir / "metrics.json").exists():
        raise RunSetError(
            f"{run_dir}: no metrics.json (not a run directory, nor a repeat directory with {REPEAT_FILE})"
        )
    result = read_run(run_dir / "metrics.json")
    for name, text in (result.histograms or {}).items():
        try:
            LatencyHistogram.decode(text)
        except Exception:  # hdrh raises several types for a corrupt encoding
            raise RunSetError(
                f"{run_dir / 'metrics.json'}: not a loadtest result: histograms.{name}: "
                "not an encoded HDR histogram"
            ) from None
    return result
