"""The HTML reports in a real headless Chromium (Debian's ``chromium``, driven by Playwright): each
page renders with no console error and no request leaving the file, its tabs switch, a marker's
tooltip shows the exact figure, and with JavaScript off or printed every section is there.
Screenshots go to ``test-artifacts/`` (or $TEST_ARTIFACTS) for a person to look at."""

import json
import os
import shutil
from pathlib import Path

import pytest

from loadtest.core.histogram import LatencyHistogram
from loadtest.reporters import html, sweep_report
from loadtest.results.model import RegressionCheck, RunMetrics, SweepDoc

pytestmark = pytest.mark.integration
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS") or Path(__file__).parents[2] / "test-artifacts")


@pytest.fixture(scope="module")
def browser():
    # Playwright's sync API holds an event loop on this thread: a test takes its run first
    if not CHROMIUM:
        if os.environ.get("CI"):
            pytest.fail("CI must have chromium (.ci/run installs it)")
        pytest.skip("no chromium here: apt-get install chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


class Page:
    """A page opened from a file, with everything it logged and asked for."""

    def __init__(self, browser, path: Path, javascript: bool = True):
        self.context = browser.new_context(
            java_script_enabled=javascript, viewport={"width": 1200, "height": 900}
        )
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on(
            "console",
            lambda m: self.errors.append(m.text) if m.type in ("error", "warning") else None,
        )
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.errors.append(f"dialog: {d.message}"), d.dismiss()))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.as_uri())
        self.page.wait_for_load_state("load")

    def assert_clean(self, path: Path) -> None:
        assert self.errors == []
        assert self.requests == [path.as_uri()]  # nothing but the file itself

    def visible_sections(self) -> list[str]:
        return self.page.eval_on_selector_all(
            "main>section", "ss => ss.filter(s => s.offsetParent !== null).map(s => s.id)"
        )

    def screenshot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / name), full_page=True)
        assert (ARTIFACTS / name).stat().st_size > 10_000

    def close(self) -> None:
        self.context.close()


@pytest.fixture(scope="module")
def run_report(tmp_path_factory):
    """A real run on the simulator with fake NVML (GPU series), an SLA, a hostile name, and a
    roofline with both phases on known peaks."""
    from tests.fake_nvml import FakeNVML, run_with_nvml

    tmp = tmp_path_factory.mktemp("browser")
    data = {
        "name": "<script>alert(1)</script>",
        "backend": {"kind": "sim", "max_concurrency": 4, "decode_ms_per_token": 2},
        "workload": {"input_tokens": 10, "output_tokens": 8},
        "load": {"arrival": {"kind": "poisson", "rate": 40}, "duration": "1.5s"},
        "telemetry": {"interval": "50ms"},
        "sla": {"ttft_p99": "1s"},
    }
    m = json.loads(json.dumps(run_with_nvml(tmp, data, FakeNVML()).metrics))
    m["roofline"] = {
        "peaks": {"bw_gb_s": 3350, "tflops": 989, "source": "test"},
        "model": {"linear_flops_per_token": 2_000_000_000,
                  "attention_flops_per_token_per_context": 131_072,
                  "weight_bytes": 5_000_000_000, "kv_bytes_per_token": 32_768},
        "decode": {"steps": 200, "step_ms": 5.0, "batch_mean": 4.0, "bytes_per_step": 5_000_000_000,
                   "achieved_gb_s": 1000.0, "achieved_tflops": 4.0,
                   "intensity_flop_per_byte": 4.0, "mbu": 0.3, "mfu": 0.004},
        "prefill": {"batches": 10, "tokens": 1000, "tokens_per_s": 1e5, "achieved_tflops": 200.0,
                    "intensity_flop_per_byte": 500.0, "mfu": 0.2},
        "diagnosis": {"verdict": "memory-bound", "evidence": [], "remedies": [],
                      "host_heavy_ops": []},
    }  # fmt: skip
    path = tmp / "report.html"
    path.write_text(html.run_html(RunMetrics.model_validate(m)))
    return m, path


def test_run_report_in_chromium(run_report, browser):
    m, path = run_report
    assert path.stat().st_size < 2_000_000
    page = Page(browser, path)
    try:
        p = page.page
        assert p.title() == "<script>alert(1)</script>"  # shown as text, never run
        assert page.visible_sections() == ["summary"]  # tabs: one section at a time
        p.click("nav.tabs a[href='#latency']")
        assert page.visible_sections() == ["latency"]
        # the first marker of the percentile plot is TTFT at p0; its tooltip gives the exact figure
        ttft = LatencyHistogram.decode(m["histograms"]["ttft"])
        marker = p.locator("#latency svg .pt").nth(3)  # p0, p10, p25, p50
        marker.hover()
        assert p.locator("#tip").is_visible()
        assert p.locator("#tip").inner_text() == f"ttft p50: {ttft.percentile_ms(50):.4g} ms"
        page.screenshot("run-latency.png")
        p.click("nav.tabs a[href='#time']")
        assert p.locator("#time svg").count() == 1
        assert "GPU 0 kernel-active %" in p.locator("#time svg").text_content()
        page.screenshot("run-over-time.png")
        p.click("nav.tabs a[href='#engine']")
        assert p.locator("#engine svg .pt").count() == 2  # decode and prefill on the roof
        page.screenshot("run-roofline.png")
        page.assert_clean(path)
    finally:
        page.close()


def test_run_report_reads_in_full_without_javascript_and_printed(run_report, browser):
    _, path = run_report
    page = Page(browser, path, javascript=False)
    try:
        every = ["summary", "latency", "time", "engine", "env"]
        assert [s for s in page.visible_sections() if s in every] == every
        # no script ran: the markers keep their SVG titles, the browser's own tooltips
        assert page.page.locator("svg .pt title").count() > 40
        page.screenshot("run-no-javascript.png")
        page.assert_clean(path)
    finally:
        page.close()
    page = Page(browser, path)
    try:
        page.page.emulate_media(media="print")
        assert len(page.visible_sections()) == len(every) + ("traffic" in page.visible_sections())
        assert not page.page.locator("nav.tabs").is_visible()
        assert page.page.pdf()[:4] == b"%PDF"
    finally:
        page.close()


def test_sweep_and_compare_reports_in_chromium(run_report, browser, tmp_path):
    m, _ = run_report
    point = {
        "output_tokens_per_s": 100.0,
        "ttft_p99_ms": 10.0,
        "itl_p99_ms": 2.0,
        "e2e_p99_ms": 50.0,
    }
    curve = [
        {"x": 1, "status": "ok", "steady": True, **point},
        {"x": 2, "status": "ok", "steady": True, **{**point, "output_tokens_per_s": 190.0}},
        {"x": 4, "status": "ok", "steady": False, **{**point, "output_tokens_per_s": 200.0}},
        {"x": 8, "status": "invalid", "steady": False, **{**point, "output_tokens_per_s": 150.0}},
    ]
    doc = {
        "axis": "load.arrival.rate",
        "status": "partial",
        "scenario_file": "s.yml",
        "curve": curve,
        "knee": 2,
        "frontier": [1, 2],
        "knee_caveats": ["overloaded points are left out of the knee and frontier: [4]"],
        "points": [
            {"params": {"load.arrival.rate": 8}, "status": "invalid", "reason": "<b>x</b>",
             "run_dir": "point-03", "metrics": None}
        ],
        "axes": {"load.arrival.rate": [1, 2, 4, 8]},
    }  # fmt: skip
    sweep_report.write(SweepDoc.model_validate(doc), tmp_path)
    page = Page(browser, tmp_path / "sweep.html")
    try:
        tips = page.page.eval_on_selector_all(
            "#curves svg .pt", "us => us.map(u => u.getAttribute('data-tip'))"
        )
        # every point is marked with its kind: once on the throughput and frontier plots, three
        # times (TTFT, ITL, E2E) on the latency plot
        for kind, n in (("steady", 2), ("unsteady", 1), ("invalid", 1)):
            assert sum(f"({kind})" in t for t in tips) == 5 * n
        assert "caveat" in page.page.inner_text("#curves")
        page.screenshot("sweep.png")
        page.assert_clean(tmp_path / "sweep.html")
    finally:
        page.close()
    checks = [
        RegressionCheck(name="ttft_p99", unit="ms", baseline=10.0, candidate=12.0, ratio=1.2,
                        lo=1.05, hi=1.35, verdict="FAIL", reason="slower", change_pct=20.0,
                        change_interval_pct=(5.0, 35.0), significant=True),
    ]  # fmt: skip
    page_path = tmp_path / "compare.html"
    page_path.write_text(
        html.compare_html("a", "b", checks, 0.95, (m["histograms"], m["histograms"]), [])
    )
    page = Page(browser, page_path)
    try:
        assert "+5.0% .. +35.0%" in page.page.inner_text("#comparison")
        assert page.page.locator("#comparison svg .pt").count() == 2 * 3 * 14  # 2 runs x 3 metrics
        page.screenshot("compare.png")
        page.assert_clean(page_path)
    finally:
        page.close()
