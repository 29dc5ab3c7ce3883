"""The live metrics endpoint without a Prometheus: bucket counts, the exposition a scrape
reads, and when the endpoint lets the session end."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request

from loadtest.core.histogram import LatencyHistogram
from loadtest.execution.live import LiveStats, LiveTotals
from loadtest.reporters.live_metrics import BUCKETS_S, MetricsEndpoint, buckets

LABELS = ("chat", "run-1", "rate=4", "sim")


def test_bucket_counts_are_cumulative_and_never_early():
    """400 µs and 1,000 µs are exact in HDR (under 2,048); 3,000 µs sits in a bucket two wide,
    whose highest equivalent value (3,001) is what is compared with a bound."""
    h = LatencyHistogram()
    for us in (400, 1_000, 3_000, 3_000):
        h.record_us(us)
    got = dict(buckets(h))
    assert got["0.0005"] == 1.0
    assert got["0.001"] == 2.0
    assert got["0.0025"] == 2.0
    assert got["0.005"] == 4.0
    assert got["120"] == 4.0 and got["+Inf"] == 4.0
    assert [b for b, _ in buckets(h)][:-1] == [f"{b:g}" for b in BUCKETS_S]
    assert all(v == 0.0 for _, v in buckets(LatencyHistogram()))


class _Source:
    """A point whose figures change between scrapes, read on its loop."""

    def __init__(self) -> None:
        self.sent = 0
        self.reads = 0
        self.thread: int | None = None

    def stats(self, percentiles: bool = True, totals: bool = False) -> LiveStats:
        self.reads += 1
        self.thread = threading.get_ident()
        ttft = LatencyHistogram()
        ttft.record_us(2_000)  # exact in HDR (under 2,048 µs)
        part = LiveTotals(completed=3, failed=1, output_tokens=48, failed_by_type={"timeout": 1})
        part.histograms["ttft"] = ttft
        return LiveStats(elapsed_s=2.0, sent=self.sent, in_flight=2, totals=part)


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def test_a_scrape_reads_the_point_on_its_loop_and_the_endpoint_ends_at_the_next_scrape():
    """Each scrape reads the point on the event loop's thread (where its figures change), not
    the server's; after ``done`` the point keeps its final figures and verdicts, and ``close``
    returns at the first scrape after it, long before its 30 s linger."""
    source = _Source()

    async def go() -> tuple[str, float]:
        endpoint = MetricsEndpoint(0, "127.0.0.1", linger_s=30.0)
        url = endpoint.start()
        endpoint.watch(LABELS, source)
        source.sent = 7
        live = await asyncio.to_thread(_scrape, url)
        final = LiveStats(elapsed_s=3.0, sent=9, totals=LiveTotals(completed=8))
        endpoint.done(LABELS, final, {"valid": True, "steady": False})
        threading.Timer(0.3, _scrape, (url,)).start()  # Prometheus, a moment later
        t = time.monotonic()
        await endpoint.close()
        return live, time.monotonic() - t

    loop_thread = threading.get_ident()
    live, waited = asyncio.run(go())
    assert source.thread == loop_thread and source.reads == 1
    lab = 'model="sim",point="rate=4",run="run-1",scenario="chat"'
    assert f"loadtest_requests_sent_total{{{lab}}} 7.0" in live
    assert f"loadtest_requests_completed_total{{{lab}}} 3.0" in live
    assert f'loadtest_requests_failed_total{{error_type="timeout",{lab}}} 1.0' in live
    assert f"loadtest_point_running{{{lab}}} 1.0" in live
    assert f'loadtest_ttft_seconds_bucket{{le="0.001",{lab}}} 0.0' in live
    assert f'loadtest_ttft_seconds_bucket{{le="0.0025",{lab}}} 1.0' in live
    q = 'metric="ttft",model="sim",point="rate=4",quantile="0.5",run="run-1",scenario="chat"'
    assert f"loadtest_latency_seconds{{{q}}} 0.002" in live
    assert waited < 10.0


def test_the_final_figures_and_verdicts_are_served_after_the_point_ends():
    async def go() -> str:
        endpoint = MetricsEndpoint(0, "127.0.0.1", linger_s=0.2)
        url = endpoint.start()
        endpoint.done(LABELS, LiveStats(sent=9, totals=LiveTotals(completed=8)), {"valid": False})
        text = await asyncio.to_thread(_scrape, url)
        await endpoint.close()  # scraped already: no wait
        return text

    text = asyncio.run(go())
    lab = 'model="sim",point="rate=4",run="run-1",scenario="chat"'
    assert f"loadtest_requests_sent_total{{{lab}}} 9.0" in text
    assert f"loadtest_requests_completed_total{{{lab}}} 8.0" in text
    assert f"loadtest_point_running{{{lab}}} 0.0" in text
    assert f"loadtest_point_valid{{{lab}}} 0.0" in text
    assert "loadtest_point_steady{" not in text  # no stability verdict given


def test_an_endpoint_without_its_extra_or_its_port_stops_the_run_saying_which(
    monkeypatch, tmp_path
):
    """Before anything loads: the missing extra named with its install command; a taken port
    named with its address (exit 2, OutputError)."""
    import socket
    import sys

    import pytest
    import yaml

    from loadtest.config.loading import parse_scenario
    from loadtest.core.errors import OutputError
    from loadtest.session.live_metrics import SessionMetrics

    def scenario(port: int):
        text = yaml.safe_dump(
            {"name": "m", "backend": {"kind": "noop"}, "load": {"arrival": {"kind": "concurrency", "users": 1}, "requests": 1},
             "outputs": {"metrics_port": port,
             "metrics_address": "127.0.0.1"}}
        )  # fmt: skip
        return parse_scenario(text, tmp_path / "s.yml", []).scenario

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OutputError, match=f"cannot serve on 127.0.0.1:{port}"):
            SessionMetrics().begin(scenario(port), "run", "")
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(OutputError, match=r"pip install 'llm-loadtest\[prometheus\]'"):
        SessionMetrics().begin(scenario(0), "run", "")


def test_a_point_that_ends_while_being_read_keeps_its_final_figures():
    """A read whose snapshot was taken as the point ended (here: the point ends inside it)
    must not put the stale figures over the final ones that ``done`` set."""
    from loadtest.reporters.live_points import LivePoints

    points = LivePoints()
    final = LiveStats(sent=10, totals=LiveTotals(completed=10))

    class Ending:
        def stats(self, percentiles: bool = True, totals: bool = False) -> LiveStats:
            points.done(LABELS, final, {"valid": True})  # on the loop, as the read runs
            return LiveStats(sent=7, totals=LiveTotals(completed=7))

    async def go() -> list:
        points.watch(LABELS, Ending())
        return await asyncio.to_thread(points.read)

    (point,) = asyncio.run(go())
    assert point.last is final and point.source is None


def test_a_running_point_is_judged_valid_and_steady_so_far():
    """Valid so far while neither lag has more than 1% (and more than one) of its samples over
    its limit; unsteady once an open loop delivers under 95% of what it offers while its
    backlog grew past 3 sqrt(backlog + 1) over the last 10 s: from 10 to 40 (30 > 19.2)
    is, from 10 to 25 (15 < 15.3) is not."""
    import time as _time

    from loadtest.reporters.live_points import LivePoint

    def stats(backlog: int, late: int) -> LiveStats:
        lag = LatencyHistogram()
        for k in range(100):
            lag.record_us(20_000 if k < late else 100)  # 20 ms late, or 0.1 ms
        return LiveStats(totals=LiveTotals(histograms={"dispatch_lag": lag}, backlog=backlog))

    def judged(backlog: int, late: int) -> dict[str, bool]:
        point = LivePoint(LABELS, None, None, limits=(10_000_000, 10_000_000))
        point.backlogs.append((_time.monotonic() - 11.0, 10))
        point.rate_now = (10.0, 5.0)  # offered, delivered (req/s, the last 5 s)
        point.judge(stats(backlog, late))
        return point.verdicts

    assert judged(40, 1) == {"valid": True, "steady": False}  # one late sample: a hiccup
    assert judged(25, 2) == {"valid": False, "steady": True}  # 2 of 100 late: over 1%


def test_the_endpoint_listens_on_loopback_unless_asked():
    """No listener beyond loopback by default (the scenario's default too); every interface
    only when asked, and then it says so where it prints the URL."""
    from loadtest.config.observing import Outputs

    assert Outputs().metrics_address == "127.0.0.1"
    endpoint = MetricsEndpoint(0, linger_s=0.0)
    url = endpoint.start()
    try:
        assert endpoint._server.server_address[0] == "127.0.0.1"  # type: ignore[attr-defined]
        assert url == f"http://127.0.0.1:{endpoint.port}/metrics"
    finally:
        endpoint._server.shutdown()  # type: ignore[attr-defined]
    every = MetricsEndpoint(0, "0.0.0.0", linger_s=0.0)
    try:
        assert every.start().endswith("/metrics (listening on every interface)")
    finally:
        every._server.shutdown()  # type: ignore[attr-defined]


def test_many_scrapers_at_once_cost_the_run_a_bounded_share():
    """60 scrapes within a moment: at most MAX_SCRAPES_PER_S a second are served (the rest
    closed unanswered, costing the run no thread), from one read of the run's event loop a
    READ_EVERY_S, whatever their number."""
    from concurrent.futures import ThreadPoolExecutor

    from loadtest.reporters import live_metrics, live_points

    source = _Source()

    def tried(url: str) -> str | None:
        try:
            return _scrape(url)
        except OSError:  # closed unanswered: over the cap
            return None

    async def go() -> list[str | None]:
        endpoint = MetricsEndpoint(0, "127.0.0.1", linger_s=0.0)
        url = endpoint.start()
        endpoint.watch(LABELS, source)
        source.sent = 5

        def scrapes() -> list[str | None]:
            with ThreadPoolExecutor(max_workers=live_metrics.MAX_SCRAPERS) as pool:
                return list(pool.map(tried, [url] * 60))

        pages = await asyncio.to_thread(scrapes)
        await endpoint.close()
        return pages

    started = time.monotonic()
    pages = asyncio.run(go())
    elapsed = time.monotonic() - started
    served = [p for p in pages if p is not None]
    assert served and all("loadtest_requests_sent_total" in p for p in served)
    assert len(served) <= live_metrics.MAX_SCRAPES_PER_S * (1 + elapsed)
    assert source.reads <= 1 + int(elapsed / live_points.READ_EVERY_S)


def test_scrapers_past_the_cap_are_closed_at_once(monkeypatch):
    """Each connection is a thread and a descriptor of the run's own process: past
    MAX_SCRAPERS at once, a connection is closed unanswered, and the held ones are freed when
    they go."""
    import socket

    from loadtest.reporters import live_metrics

    monkeypatch.setattr(live_metrics, "MAX_SCRAPES_PER_S", 1000.0)  # the slots' cap alone

    endpoint = MetricsEndpoint(0, "127.0.0.1", linger_s=0.0)
    url = endpoint.start()
    port = endpoint.port
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(live_metrics.MAX_SCRAPERS)]
    time.sleep(0.3)  # accepted, each holding a slot (they send nothing)
    extra = socket.create_connection(("127.0.0.1", port))
    extra.settimeout(5)
    assert extra.recv(1) == b""  # closed unanswered, at once (not after the idle timeout)
    for s in held:
        s.close()
    time.sleep(0.3)
    with urllib.request.urlopen(url, timeout=10) as r:  # served again once they left
        assert r.status == 200
    extra.close()
    asyncio.run(endpoint.close())
