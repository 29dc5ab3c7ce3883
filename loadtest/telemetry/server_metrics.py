"""The server's own view: its Prometheus ``/metrics``, sampled during the run.

vLLM, SGLang and TGI each expose their state under their own names; they are mapped to common
ones (``server_names``). Three kinds:

- gauges (requests running and waiting, summed over label sets; KV-cache usage as a fraction
  of the cache, its mean over them: several data-parallel engines): mean, max and last over
  the window, and a column per sample in ``server.csv``;
- histograms (TTFT, ITL, TPOT, end to end, queue, prefill and decode time), whose ``_sum`` and
  ``_count`` give the mean over the window and over each sample interval;
- counters (prompt and generation tokens, preemptions, prefix-cache hits and queries,
  speculative decoding's drafts, draft tokens and accepted tokens), whose change over the
  window is reported, and whose ratios (the prefix-cache hit rate, the draft acceptance rate
  and the mean acceptance length) are taken over the window and over each sample interval.

Samples are taken on a thread (an HTTP GET must not run on the dispatching event loop), stamped
with ``time.monotonic_ns()``: the clock the latencies are measured on, so ``server.csv`` lines up
with the run's intervals. A last sample is taken when sampling stops, so counter changes cover
every request the run sent.
"""

from __future__ import annotations

import io
import threading
import time

from loadtest.backends.openai.discovery import server_root
from loadtest.telemetry.server_names import (
    COUNTERS,
    DIMENSIONS,
    GAUGES,
    HISTOGRAMS,
    RATIO_GAUGES,
    RATIO_OFFSETS,
    RATIOS,
    SPLIT,
    UNITS,
    read_page,
)
from loadtest.telemetry.server_section import (
    Sample,
    ServerMetric,
    ServerMetrics,
    ServerSection,
)
from loadtest.transport.calls import scrape
from loadtest.transport.settings import ClientSettings

MAX_BODY = 8 << 20  # a metrics page larger than this is not read whole
STOPPING_JOIN_S = 0.5  # a run stopped by a signal waits this long for the sampler's thread


def _first(names: tuple[str, ...], values: dict[str, float], suffix: str = "") -> str | None:
    return next((n for n in names if n + suffix in values), None)


def _delta(first: dict[str, float], last: dict[str, float], name: str) -> float:
    return last.get(name, 0.0) - first.get(name, 0.0)


def _ratio(
    first: dict[str, float], last: dict[str, float], common: str
) -> tuple[float | None, str | None]:
    """A counter ratio's value between two samples (None when its denominator did not move),
    or the server's own gauge of it at the later one; and the name it came from."""
    for num, den in RATIOS.get(common, ()):
        if num in last and den in last:
            moved = _delta(first, last, den)
            offset = RATIO_OFFSETS.get(common, 0.0)
            value = _delta(first, last, num) / moved + offset if moved > 0 else None
            return value, num.removesuffix("_total")
    gauge = _first(RATIO_GAUGES.get(common, ()), last)
    return (None, None) if gauge is None else (last[gauge], gauge)


def _hist_mean(
    first: dict[str, float], last: dict[str, float], common: str
) -> tuple[float | None, float, str | None]:
    """A histogram's mean and count between two samples, and its name."""
    name = _first(HISTOGRAMS[common], last, "_count")
    if name is None:
        return None, 0.0, None
    count = _delta(first, last, name + "_count")
    mean = _delta(first, last, name + "_sum") / count if count > 0 else None
    return mean, count, name


class ServerSampler:
    """Polls ``url`` every ``interval_s`` on its own thread until stopped, each call under
    ``settings`` (the run's: its TLS, proxy and headers)."""

    def __init__(
        self,
        url: str,
        interval_s: float,
        timeout_s: float = 2.0,
        settings: ClientSettings | None = None,
    ) -> None:
        self.url, self.interval_s, self.timeout_s = url, interval_s, timeout_s
        self.settings = settings or ClientSettings()
        self.rows: list[Sample] = []
        self.errors = 0
        self.cut = 0  # samples whose page ran past MAX_BODY (read up to it)
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="loadtest-server")

    def start(self) -> None:
        self._thread.start()

    def stop(self, final: bool = True) -> None:
        """Stop polling and take one last sample (bounded by ``timeout_s``); not ``final`` (a
        signal stopped the run: the result is to be written now), no last sample and no wait
        for a scrape under way, up to ``timeout_s`` more: the series ends where it was."""
        self._stop.set()
        if not final:
            self._thread.join(STOPPING_JOIN_S)
            return
        self._thread.join(self.timeout_s + self.interval_s + 1)
        if not self._thread.is_alive():
            self._sample()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def _sample(self) -> None:
        t = time.monotonic_ns()
        page, why = scrape(self.settings, self.url, MAX_BODY + 1, self.timeout_s)
        if page is None:
            self.errors += 1
            self.last_error = why
            return
        values, cut = read_page(io.BytesIO(page), MAX_BODY)
        self.rows.append((t, values))
        self.cut += cut

    def summary(self, t0_ns: int, span: tuple[int, int] | None) -> ServerSection:
        """Per common metric over the window: mean, max and last of gauges; means of
        histograms and ratios of counters from their change across it; the change of each
        counter over the whole run. ``available: false`` with the reason when nothing came."""
        rows = [r for r in self.rows if span is None or span[0] <= r[0] <= span[1]] or self.rows
        if not rows:
            return ServerSection(
                available=False, source=self.url, reason=self.last_error or "no sample"
            )
        metrics, found = _metrics(rows, self.rows)
        by = {f"by_{dim}": _by(dim, rows, self.rows) for dim in DIMENSIONS}
        return ServerSection(
            available=True,
            source=self.url,
            samples=len(rows),
            pages_cut=self.cut,
            # the window's metrics are changes between these two samples (s from t0)
            sampled_s=[
                round((rows[0][0] - t0_ns) / 1e9, 6),
                round((rows[-1][0] - t0_ns) / 1e9, 6),
            ],
            errors=self.errors,
            server_names=found,
            units={k: UNITS[k] for k in metrics},
            metrics=metrics,
            # the gauges over the whole run, for the report's plots beside the client's figures
            series=_series(self.csv_rows(t0_ns)),
            # where the server labels its series by model, engine or adapter, and has more
            # than one: each one's own (by_model, by_engine, by_adapter)
            **{k: v for k, v in by.items() if v},
        )

    def csv_rows(self, t0_ns: int) -> list[dict[str, float | None]]:
        """One row a sample: seconds from t0, each common gauge found, and the prefix-cache hit
        rate and each histogram's mean over the interval since the sample before."""
        out = []
        previous: dict[str, float] = {}
        for t, values in self.rows:
            row: dict[str, float | None] = {"t_s": round((t - t0_ns) / 1e9, 3)}
            for common, names in GAUGES.items():
                name = _first(names, values)
                row[common] = None if name is None else values[name]
            for common in RATIOS:
                row[common] = _ratio(previous, values, common)[0] if previous else None
            for common in HISTOGRAMS:
                row[f"{common}_mean"] = (
                    _hist_mean(previous, values, common)[0] if previous else None
                )
            out.append(row)
            previous = values
        return out


def _metrics(rows: list[Sample], run_rows: list[Sample]) -> tuple[ServerMetrics, dict[str, str]]:
    """Per common metric: gauges' mean, max and last over ``rows``; histograms' means and
    counter ratios from their change across them; counters' change over ``run_rows`` (the
    whole run). And the server's name each came from."""
    metrics: ServerMetrics = {}
    found: dict[str, str] = {}
    for common, names in GAUGES.items():
        name = _first(names, rows[-1][1])
        if name is None:
            continue
        values = [r[1][name] for r in rows if name in r[1]]
        metrics[common] = ServerMetric(
            mean=sum(values) / len(values), max=max(values), last=values[-1]
        )
        found[common] = name
    first, last = rows[0][1], rows[-1][1]
    for common in RATIOS:
        value, name = _ratio(first, last, common)
        if name is not None:
            metrics[common] = ServerMetric(window=value)
            found[common] = name
    for common in HISTOGRAMS:
        mean, count, name = _hist_mean(first, last, common)
        if name is not None:
            metrics[common] = ServerMetric(window_mean=mean, window_count=count)
            found[common] = name
    run_first, run_last = run_rows[0][1], run_rows[-1][1]
    for common, names in COUNTERS.items():
        name = _first(names, run_last)
        if name is not None:
            metrics[common] = ServerMetric(run_change=_delta(run_first, run_last, name))
            found[common] = name
    return metrics, found


def _by(dim: str, rows: list[Sample], run_rows: list[Sample]) -> dict[str, ServerMetrics]:
    """Each model's (engine's, adapter's: ``dim``) own metrics, where the server labels its
    series so and has more than one; else empty."""
    mark = f"{SPLIT}{dim}="
    values = sorted({k.split(mark, 1)[1] for k in rows[-1][1] if mark in k})
    if len(values) < 2:
        return {}

    def own(rs: list[Sample], value: str) -> list[Sample]:
        tail = mark + value
        return [
            (t, {k[: -len(tail)]: v for k, v in vals.items() if k.endswith(tail)}) for t, vals in rs
        ]

    return {v: _metrics(own(rows, v), own(run_rows, v))[0] for v in values}


def _series(rows: list[dict[str, float | None]]) -> dict[str, list[float | None]]:
    """Columns of the sampled rows: t_s and each gauge the server has."""
    keys = ["t_s"] + [c for c in GAUGES if any(r[c] is not None for r in rows)]
    return {k: [r[k] for r in rows] for k in keys}


class EndpointSamplers:
    """One sampler an endpoint, where a run drives several: the first endpoint's summary and
    ``server.csv`` stand as the run's ``server`` (the reports read it), with every endpoint's
    own summary under ``endpoints``, by its API root."""

    def __init__(self, samplers: dict[str, ServerSampler]) -> None:
        self.samplers = samplers
        self.first = next(iter(samplers.values()))

    def start(self) -> None:
        for s in self.samplers.values():
            s.start()

    def stop(self, final: bool = True) -> None:
        for s in self.samplers.values():
            s.stop(final)

    def summary(self, t0_ns: int, span: tuple[int, int] | None) -> ServerSection:
        out = self.first.summary(t0_ns, span)
        out.scope = "the first endpoint's; endpoints: each one's"
        out.endpoints = {base: s.summary(t0_ns, span) for base, s in self.samplers.items()}
        return out

    @property
    def rows(self) -> list[Sample]:
        return self.first.rows

    def csv_rows(self, t0_ns: int) -> list[dict[str, float | None]]:
        return self.first.csv_rows(t0_ns)


def metrics_url(base_url: str) -> str:
    """``http://host:8000/v1`` -> ``http://host:8000/metrics`` (where vLLM, SGLang, TGI serve it)."""
    return server_root(base_url) + "/metrics"
