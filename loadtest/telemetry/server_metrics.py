"""The server's own view: its Prometheus ``/metrics``, sampled during the run.

vLLM, SGLang and TGI each expose their state under their own names; they are mapped to common
ones. The names are those the servers expose today (vLLM V1, read off a running vLLM 0.32; SGLang
and TGI from their documentation), each followed by older names kept as fallbacks. Three kinds:

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
import math
import re
import threading
import time
from typing import BinaryIO

from loadtest.backends.openai.discovery import server_root
from loadtest.telemetry.server_section import (
    Sample,
    ServerMetric,
    ServerMetrics,
    ServerSection,
)
from loadtest.transport.calls import scrape
from loadtest.transport.settings import ClientSettings

# common name -> the names servers use for it (gauges; over label sets as parse() says), newest first
GAUGES: dict[str, tuple[str, ...]] = {
    "requests_running": (
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "tgi_batch_current_size",
    ),
    "requests_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"),
    # a fraction of the KV cache in use, 0..1 (vLLM's "perc" is a fraction too)
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
    ),
}
# common name -> (numerator, denominator) counters; a gauge of the same common name is the
# fallback of servers that publish the ratio itself (vLLM before V1, SGLang)
RATIOS: dict[str, tuple[tuple[str, str], ...]] = {
    "prefix_cache_hit_rate": (
        ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
        ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
    ),
    # speculative decoding: draft tokens accepted / proposed, and tokens a verification step
    # yields (the accepted drafts and the target model's own token: vLLM's 1 + accepted/drafts)
    "spec_acceptance_rate": (
        ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"),
    ),
    "spec_accept_length": (
        ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total"),
    ),
}
RATIO_OFFSETS = {"spec_accept_length": 1.0}  # added to a ratio of counters (not to a gauge)
RATIO_GAUGES: dict[str, tuple[str, ...]] = {
    "prefix_cache_hit_rate": ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"),
    "spec_acceptance_rate": ("sglang:spec_accept_rate",),
    "spec_accept_length": ("sglang:spec_accept_length",),
}
# common name -> histogram base names (``_sum``/``_count`` are read), in seconds
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft_s": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl_s": (
        "vllm:inter_token_latency_seconds",
        "sglang:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",  # vLLM before 0.11: the ITL under TPOT's name
    ),
    "tpot_s": (
        "vllm:request_time_per_output_token_seconds",
        "sglang:time_per_output_token_seconds",
        "tgi_request_mean_time_per_token_duration",
    ),
    "e2e_s": (
        "vllm:e2e_request_latency_seconds",
        "sglang:e2e_request_latency_seconds",
        "tgi_request_duration",
    ),
    "queue_s": (
        "vllm:request_queue_time_seconds",
        "sglang:queue_time_seconds",
        "tgi_request_queue_duration",
    ),
    "prefill_s": ("vllm:request_prefill_time_seconds",),
    "decode_s": ("vllm:request_decode_time_seconds",),
}
# common name -> counter names; the change over the run is reported
COUNTERS: dict[str, tuple[str, ...]] = {
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    "preemptions": ("vllm:num_preemptions_total",),
    "requests_finished": ("vllm:request_success_total", "sglang:num_requests_total"),
    "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
}
# what only a server running speculative decoding publishes
SPECULATIVE = (
    "spec_acceptance_rate",
    "spec_accept_length",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
)
UNITS = {
    "requests_running": "requests",
    "requests_waiting": "requests",
    "kv_cache_usage": "fraction of the KV cache (0-1)",
    "prefix_cache_hit_rate": "fraction of prompt tokens found in the cache (0-1)",
    "spec_acceptance_rate": "fraction of draft tokens accepted (0-1)",
    "spec_accept_length": "tokens a verification step yields (accepted drafts + 1)",
    "spec_drafts": "speculation steps",
    "spec_draft_tokens": "tokens",
    "spec_accepted_tokens": "tokens",
    **{name: "seconds" for name in HISTOGRAMS},
    "prompt_tokens": "tokens",
    "generation_tokens": "tokens",
    "preemptions": "requests preempted",
    "requests_finished": "requests",
}
# the columns server.csv holds per sample: gauges, then per-interval ratios and means
CSV_COLUMNS = ["t_s", *GAUGES, *RATIOS, *(f"{h}_mean" for h in HISTOGRAMS)]
MAX_BODY = 8 << 20  # a metrics page larger than this is not read whole
STOPPING_JOIN_S = 0.5  # a run stopped by a signal waits this long for the sampler's thread
# the names a sample keeps: a line of any other metric is skipped unread (pages of tens of
# MB exist; read line by line, no single step holds the interpreter long enough to delay the
# dispatching loop)
_WANTED = tuple(
    {
        n.encode()
        for names in (
            *GAUGES.values(),
            *RATIO_GAUGES.values(),
            *HISTOGRAMS.values(),
            *COUNTERS.values(),
        )
        for n in names
    }
    | {n.encode() for pairs in RATIOS.values() for pair in pairs for n in pair}
)


# Fractions each engine publishes of its own (its KV cache, its hit rate): over the label sets
# of several engines (data parallel) their mean, the share of them all; a sum read 1.3 for two
# engines' caches 65% full. Counts and counters are summed.
MEAN_OVER_LABELS = frozenset(
    [*GAUGES["kv_cache_usage"], *(n for names in RATIO_GAUGES.values() for n in names)]
)


# A series labelled with what it belongs to is also kept as that one's own, under
# "<name>\x00<dimension>=<value>": its model (vLLM's and SGLang's model_name, a gateway's model),
# its engine (vLLM's engine, SGLang's dp_rank: data-parallel replicas), its adapter (lora_name).
SPLIT = "\x00"
DIMENSIONS = {
    "model": re.compile(r'[{,]\s*(?:model_name|model)="([^"]{1,200})"'),
    "engine": re.compile(r'[{,]\s*(?:engine|dp_rank)="([^"]{1,50})"'),
    "adapter": re.compile(r'[{,]\s*(?:lora_name|adapter)="([^"]{1,200})"'),
}


def parse(text: str) -> dict[str, float]:
    """Prometheus text exposition -> ``{metric name: value}``, summed over label sets, or their
    mean for an engine's fraction (``MEAN_OVER_LABELS``), and each model's, engine's and
    adapter's own where the series name theirs (``DIMENSIONS``); a histogram's ``_bucket`` lines are left out: their sum
    over ``le`` means nothing."""
    out: dict[str, float] = {}
    sets: dict[str, int] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        head, _, rest = line.partition(" ") if "{" not in line else _split_labels(line)
        fields = rest.split()
        if not head or not fields or head.endswith("_bucket"):
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            keys = [head]
            if "{" in line:  # each one's own series too (model, engine, adapter)
                for dim, label in DIMENSIONS.items():
                    found = label.search(line)
                    if found is not None:
                        keys.append(f"{head}{SPLIT}{dim}={found.group(1)}")
            for key in keys:
                out[key] = out.get(key, 0.0) + value
                sets[key] = sets.get(key, 0) + 1
    for key in out:
        if key.split(SPLIT, 1)[0] in MEAN_OVER_LABELS:
            out[key] /= sets[key]
    return out


def read_page(stream: BinaryIO, limit: int) -> tuple[dict[str, float], bool]:
    """The mapped metrics of a page read line by line from ``stream`` (up to ``limit`` bytes),
    and whether the page was longer: lines of other metrics are skipped without decoding."""
    kept: list[str] = []
    read = 0
    for raw in stream:
        read += len(raw)
        if read > limit:
            return parse("".join(kept)), True
        if raw.startswith(_WANTED):
            kept.append(raw.decode("utf-8", "replace"))
    return parse("".join(kept)), False


def _split_labels(line: str) -> tuple[str, str, str]:
    name, _, after = line.partition("{")
    _labels, _, rest = after.rpartition("}")
    return name, "", rest


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
