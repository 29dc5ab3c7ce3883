"""The server's own view: its Prometheus ``/metrics``, sampled during the run.

vLLM, SGLang and TGI each expose their state under their own names; they are mapped to common
ones (requests running and waiting, KV-cache usage, prefix-cache hit rate, server-side TTFT).
Samples are taken on a thread (an HTTP GET must not run on the dispatching event loop), stamped
with ``time.monotonic_ns()``: the clock the latencies are measured on, so ``server.csv`` lines
up with the run's intervals.
"""

from __future__ import annotations

import math
import threading
import time
import urllib.error
import urllib.request

from loadtest.backends.openai.discovery import server_root

# common name -> the names servers use for it (gauges; summed over label sets)
GAUGES: dict[str, tuple[str, ...]] = {
    "requests_running": (
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "tgi_batch_current_size",
    ),
    "requests_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"),
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
    ),
    "prefix_cache_hit_rate": ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"),
}
# common name -> (numerator, denominator) counters: a rate over the window from their changes
RATIOS: dict[str, tuple[tuple[str, str], ...]] = {
    "prefix_cache_hit_rate": (("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),),
    "server_ttft_mean_s": (
        ("vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count"),
        ("sglang:time_to_first_token_seconds_sum", "sglang:time_to_first_token_seconds_count"),
    ),
}
MAX_BODY = 8 << 20  # a metrics page larger than this is not read whole


def parse(text: str) -> dict[str, float]:
    """Prometheus text exposition -> ``{metric name: value}``, summed over label sets."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        head, _, rest = line.partition(" ") if "{" not in line else _split_labels(line)
        fields = rest.split()
        if not head or not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            out[head] = out.get(head, 0.0) + value
    return out


def _split_labels(line: str) -> tuple[str, str, str]:
    name, _, after = line.partition("{")
    _labels, _, rest = after.rpartition("}")
    return name, "", rest


class ServerSampler:
    """Polls ``url`` every ``interval_s`` on its own thread until stopped."""

    def __init__(self, url: str, interval_s: float, timeout_s: float = 2.0) -> None:
        self.url, self.interval_s, self.timeout_s = url, interval_s, timeout_s
        self.rows: list[tuple[int, dict[str, float]]] = []
        self.errors = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="loadtest-server")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout_s + self.interval_s + 1)

    def _loop(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic_ns()
            try:
                with urllib.request.urlopen(self.url, timeout=self.timeout_s) as r:
                    body = r.read(MAX_BODY).decode("utf-8", "replace")
                self.rows.append((t, parse(body)))
            except (urllib.error.URLError, OSError, ValueError) as exc:
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"[:200]
            self._stop.wait(self.interval_s)

    def summary(self, t0_ns: int, span: tuple[int, int] | None) -> dict:
        """Per common metric over the window: mean, max and last of gauges; rates from the
        counters' change across it. ``available: false`` with the reason when nothing came."""
        rows = [r for r in self.rows if span is None or span[0] <= r[0] <= span[1]] or self.rows
        if not rows:
            return {
                "available": False,
                "source": self.url,
                "reason": self.last_error or "no sample",
            }
        metrics: dict[str, dict] = {}
        found: dict[str, str] = {}
        for common, names in GAUGES.items():
            name = next((n for n in names if n in rows[-1][1]), None)
            if name is None:
                continue
            values = [r[1][name] for r in rows if name in r[1]]
            metrics[common] = {
                "mean": sum(values) / len(values),
                "max": max(values),
                "last": values[-1],
            }
            found[common] = name
        first, last = rows[0][1], rows[-1][1]
        for common, pairs in RATIOS.items():
            for num, den in pairs:
                if num in last and den in last:
                    d_den = last[den] - first.get(den, 0.0)
                    if d_den > 0:
                        metrics[common] = {"window": (last[num] - first.get(num, 0.0)) / d_den}
                        found[common] = num.rsplit("_", 1)[0]
                    break
        return {
            "available": True,
            "source": self.url,
            "samples": len(rows),
            "errors": self.errors,
            "server_names": found,
            "metrics": metrics,
            # the gauges over the whole run, for the report's plots beside the client's figures
            "series": _series(self.csv_rows(t0_ns)),
        }

    def csv_rows(self, t0_ns: int) -> list[dict]:
        """One row a sample: seconds from t0 and each common gauge found."""
        out = []
        for t, values in self.rows:
            row: dict = {"t_s": round((t - t0_ns) / 1e9, 3)}
            for common, names in GAUGES.items():
                name = next((n for n in names if n in values), None)
                row[common] = None if name is None else values[name]
            out.append(row)
        return out


def _series(rows: list[dict]) -> dict[str, list]:
    """Columns of the sampled rows: t_s and each gauge the server has."""
    keys = ["t_s"] + [c for c in GAUGES if any(r[c] is not None for r in rows)]
    return {k: [r[k] for r in rows] for k in keys}


def metrics_url(base_url: str) -> str:
    """``http://host:8000/v1`` -> ``http://host:8000/metrics`` (where vLLM, SGLang, TGI serve it)."""
    return server_root(base_url) + "/metrics"
