"""Live Prometheus metrics: while a run, sweep or repeat is under way, an HTTP endpoint
(``outputs.metrics_port``, ``--metrics-port``) serves its figures so far, labelled by scenario,
run, point (a sweep's parameters, a repeat's index) and model.

Nothing is counted on the request path. A scrape asks the event loop for the point's totals
(``Runner.stats(totals=True)``: its counters, and its histograms merged, about a millisecond of
the loop a scrape), so a run nobody scrapes pays nothing; with client workers their heartbeats
carry their totals and the endpoint serves the sum. Latency histograms are exported twice: as
Prometheus histograms (fixed buckets, for ``histogram_quantile`` and aggregation across runs)
and as ``loadtest_latency_seconds{metric, quantile}``, the HDR percentiles metrics.json reports.
A finished point keeps its last figures, and its verdicts; after the last one the endpoint stays
up until it is scraped once more (or ``metrics_linger`` passes), so the final figures are seen.

prometheus_client (the ``prometheus`` extra) is imported only when an endpoint is asked for.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from loadtest.core.histogram import LatencyHistogram
from loadtest.execution.live import LiveStats, LiveTotals
from loadtest.reporters.live_points import READ_EVERY_S, Labels, LivePoint, LivePoints, Polled

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.metrics_core import Metric

# Bucket bounds, seconds: from an ITL of half a millisecond to a two-minute answer. Few, as
# each is a line a scrape formats (the scrape's main cost); the exact figures are the quantiles.
BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
    1.0, 2.0, 5.0, 10.0, 20.0, 60.0, 120.0,
)  # fmt: skip
BOUNDS_US = tuple(round(b * 1_000_000) for b in BUCKETS_S)
HISTOGRAMS = ("ttft", "itl", "tpot", "e2e")  # dispatch_lag: its quantiles only
QUANTILES = (0.5, 0.9, 0.95, 0.99)
PERCENTS = tuple(100 * q for q in QUANTILES)
LABELS = ("scenario", "run", "point", "model")
# Scrapers served at once, and scrapes served a second (a burst of as many): more are closed
# unanswered at once. Each served scrape is a thread, a descriptor and a few hundred µs of
# Python in the run's own process, so the cap bounds what scraping costs the run however many
# scrape (a Prometheus pair every 15 s is far under it); one that sends nothing is dropped
# after SCRAPE_IDLE_S
MAX_SCRAPERS = 8
MAX_SCRAPES_PER_S = 4.0
SCRAPE_IDLE_S = 10.0


class MetricsEndpoint:
    """One HTTP endpoint for a session's points (``start`` it, ``watch`` and ``done`` each
    point, ``close`` at the end), serving ``points`` (its own unless shared with another
    export)."""

    def __init__(
        self,
        port: int,
        address: str = "127.0.0.1",
        linger_s: float = 15.0,
        points: LivePoints | None = None,
    ) -> None:
        self.port, self.address, self.linger_s = port, address, linger_s
        self.points = points if points is not None else LivePoints()
        self._scraped = threading.Event()  # set at each scrape
        self._last_scrape = -1.0  # monotonic s a scrape last began
        self._server: object | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle (on the event loop) ---------------------------------------------------------

    def start(self) -> str:
        """Serve /metrics; returns the URL. ImportError names the extra; OSError the port."""
        try:
            from prometheus_client import CollectorRegistry
        except ImportError as exc:
            raise ImportError(
                "outputs.metrics_port needs prometheus_client: pip install 'llm-loadtest[prometheus]'"
            ) from exc
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)  # a custom collector: collect() and describe()
        server = _capped_server(self.port, self.address, registry, self.points)
        thread = threading.Thread(target=server.serve_forever, daemon=True, name="metrics")
        thread.start()
        self._server, self._thread = server, thread
        self.port = server.server_port
        if _every_interface(self.address):  # asked for: said so
            return f"http://127.0.0.1:{self.port}/metrics (listening on every interface)"
        return f"http://{self.address}:{self.port}/metrics"

    def watch(self, labels: Labels, source: Polled) -> None:
        """A point starts: its figures are read from ``source`` at each scrape."""
        self.points.watch(labels, source)

    def done(self, labels: Labels, final: LiveStats, verdicts: dict[str, bool]) -> None:
        """A point ends: its final figures and verdicts, served from now on as they are."""
        self.points.done(labels, final, verdicts)

    async def close(self) -> None:
        """After the last point: wait (at most ``linger_s``) for one more scrape, then stop."""
        if self._server is None:
            return
        if self.points and self.linger_s > 0:
            await asyncio.to_thread(self._wait_for_scrape, time.monotonic() + self.linger_s)
        server, self._server = self._server, None
        server.shutdown()  # type: ignore[attr-defined]
        server.server_close()  # type: ignore[attr-defined]
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)

    def _wait_for_scrape(self, deadline: float) -> None:
        """Until a scrape began after the last point ended, or ``deadline`` (monotonic s)."""
        while True:
            self._scraped.clear()
            finished = self.points.finished_at
            if finished is None or self._last_scrape >= finished:
                return
            left = deadline - time.monotonic()
            if left <= 0 or not self._scraped.wait(left):
                return

    # -- the collector (on the server's thread) -----------------------------------------------

    def describe(self) -> list[Metric]:
        return []  # nothing to declare ahead: registering must not run a collection

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        yield from families(self.points.read())
        self._last_scrape = started
        self._scraped.set()


def families(points: list[LivePoint]) -> Iterator[Metric]:
    """Every metric family over the points' latest figures."""
    scrape = _Families()
    for point in points:
        scrape.add(point)
    yield from scrape.all()


class _Families:
    """A scrape's metric families, each point's figures added in turn."""

    def __init__(self) -> None:
        from prometheus_client.core import HistogramMetricFamily

        self.sent = _counter("loadtest_requests_sent", "Requests sent, warm-up included.")
        self.completed = _counter(
            "loadtest_requests_completed", "Measured requests answered in full."
        )
        self.failed = _counter(
            "loadtest_requests_failed", "Measured requests that failed.", ("error_type",)
        )
        self.out_tokens = _counter("loadtest_output_tokens", "Output tokens of measured requests.")
        self.in_tokens = _counter("loadtest_input_tokens", "Prompt tokens of measured requests.")
        self.in_flight = _gauge(
            "loadtest_requests_in_flight", "Requests sent and not yet finished."
        )
        self.backlog = _gauge(
            "loadtest_backlog_requests", "An open loop's requests intended by now and not done."
        )
        self.elapsed = _gauge("loadtest_elapsed_seconds", "Seconds since the point's t0.")
        self.offered = _gauge("loadtest_offered_rate", "Requests sent a second, over the last 5 s.")
        self.delivered = _gauge(
            "loadtest_delivered_rate", "Requests finished a second, over the last 5 s."
        )
        self.running = _gauge("loadtest_point_running", "1 while the point runs, 0 once it ended.")
        self.valid = _gauge(
            "loadtest_point_valid", "The point's validity verdict, so far while it runs (1: valid)."
        )
        self.steady = _gauge(
            "loadtest_point_steady",
            "The point's stability verdict, so far while it runs (1: steady).",
        )
        self.quantiles = _gauge(
            "loadtest_latency_seconds",
            "HDR percentiles of the measured requests so far, as metrics.json reports them.",
            ("metric", "quantile"),
        )
        self.histograms = {
            m: HistogramMetricFamily(
                f"loadtest_{m}_seconds",
                f"{m} of the measured requests so far.",
                labels=list(LABELS),
            )
            for m in HISTOGRAMS
        }

    def add(self, point: LivePoint) -> None:
        s, labels = point.last, list(point.labels)
        self.running.add_metric(labels, 1.0 if point.source is not None else 0.0)
        for name, verdict in point.verdicts.items():
            family = self.valid if name == "valid" else self.steady
            family.add_metric(labels, 1.0 if verdict else 0.0)
        if s is None:
            return
        totals = s.totals or LiveTotals()
        self.sent.add_metric(labels, s.sent)
        self.completed.add_metric(labels, totals.completed)
        for kind, n in sorted(totals.failed_by_type.items()):
            self.failed.add_metric([*labels, kind], n)
        if totals.failed and not totals.failed_by_type:
            self.failed.add_metric([*labels, "unknown"], totals.failed)
        self.out_tokens.add_metric(labels, totals.output_tokens)
        self.in_tokens.add_metric(labels, totals.input_tokens)
        self.in_flight.add_metric(labels, s.in_flight)
        if totals.backlog is not None:
            self.backlog.add_metric(labels, totals.backlog)
        self.elapsed.add_metric(labels, s.elapsed_s)
        if point.source is not None:
            for family, value in zip((self.offered, self.delivered), point.rate_now):
                if value is not None:
                    family.add_metric(labels, value)
        for metric, h in totals.histograms.items():
            under, sum_us, values = h.digest(BOUNDS_US, PERCENTS)
            if metric in self.histograms:
                self.histograms[metric].add_metric(labels, _le(under, h.count), sum_us / 1e6)
            if h.count:
                for q, v in zip(QUANTILES, values):
                    self.quantiles.add_metric([*labels, metric, f"{q:g}"], round(v / 1000.0, 9))

    def all(self) -> tuple[Metric, ...]:
        return (self.sent, self.completed, self.failed, self.out_tokens, self.in_tokens,
                self.in_flight, self.backlog, self.elapsed, self.offered, self.delivered,
                self.running, self.valid, self.steady, self.quantiles,
                *self.histograms.values())  # fmt: skip


def _counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> CounterMetricFamily:
    from prometheus_client.core import CounterMetricFamily

    return CounterMetricFamily(name, doc, labels=[*LABELS, *extra])


def _gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(name, doc, labels=[*LABELS, *extra])


def buckets(h: LatencyHistogram) -> list[tuple[str, float]]:
    """Cumulative counts at each bound (``le``), +Inf the whole count. A value counts under a
    bound when its HDR bucket's highest equivalent value does: never early."""
    return _le(h.digest(BOUNDS_US, ())[0], h.count)


def _le(under: list[int], count: int) -> list[tuple[str, float]]:
    return [*((f"{b:g}", float(n)) for b, n in zip(BUCKETS_S, under)), ("+Inf", float(count))]


def _capped_server(port: int, address: str, registry: CollectorRegistry, points: LivePoints) -> Any:
    """prometheus_client's WSGI app on a threading server that serves at most
    ``MAX_SCRAPERS`` connections at once (more are closed unanswered) and drops one idle for
    ``SCRAPE_IDLE_S``."""
    import socket
    import socketserver
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class Quiet(WSGIRequestHandler):
        timeout = SCRAPE_IDLE_S  # a scraper that sends nothing holds no thread for long

        def log_message(self, format: str, *args: object) -> None:
            pass  # a scrape is not news on the run's terminal

    class Capped(socketserver.ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
        slots = threading.BoundedSemaphore(MAX_SCRAPERS)

        tokens, refilled = MAX_SCRAPES_PER_S, time.monotonic()

        def process_request(self, request: Any, client_address: Any) -> None:
            now = time.monotonic()  # only the server's thread accepts: no lock needed
            self.tokens = min(
                MAX_SCRAPES_PER_S, self.tokens + (now - self.refilled) * MAX_SCRAPES_PER_S
            )
            self.refilled = now
            if self.tokens < 1 or not self.slots.acquire(blocking=False):
                self.shutdown_request(request)  # over the cap: closed, costing the run no more
                return
            self.tokens -= 1
            try:
                super().process_request(request, client_address)
            except BaseException:
                self.slots.release()
                raise

        def process_request_thread(self, request: Any, client_address: Any) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                self.slots.release()

    app = _cached_app(registry, points)
    return make_server(address, port, app, Capped, handler_class=Quiet)


def _cached_app(registry: CollectorRegistry, points: LivePoints) -> Callable[..., Iterable[bytes]]:
    """A WSGI app serving the registry's exposition, formatted at most once a
    ``READ_EVERY_S`` (formatting is the scrape's main cost: milliseconds of Python, each
    holding the interpreter from the run's event loop) and again whenever a point starts or
    ends (its final figures are served at once); every scraper in between gets those bytes."""
    from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

    lock = threading.Lock()
    cached: list[tuple[float, int, bytes]] = []

    def app(environ: dict[str, Any], start_response: Callable[..., object]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: /metrics is served here\n"]
        with lock:  # scrapers at once wait for the one formatting
            made, generation, body = cached[0] if cached else (0.0, -1, b"")
            if generation != points.generation or time.monotonic() - made >= READ_EVERY_S:
                generation = points.generation  # read first: a change meanwhile remakes it
                cached[:] = [(time.monotonic(), generation, generate_latest(registry))]
                body = cached[0][2]
        start_response(
            "200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(body)))]
        )
        return [body]

    return app


def _every_interface(address: str) -> bool:
    """Whether ``address`` is the unspecified one (IPv4's or IPv6's): every interface."""
    import ipaddress

    if not address:
        return True
    try:
        return ipaddress.ip_address(address).is_unspecified
    except ValueError:  # a host name
        return False
