"""docs/img/live-metrics-prometheus.png: a live run in Prometheus's graph page, the shipped
dashboard's TTFT query (its variables set to the run). Needs Debian's prometheus and chromium,
and the test extra (playwright).

    PYTHONPATH=. python tools/screenshot_live_metrics.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

from tests import real_servers

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        port = real_servers.free_port()
        prom = real_servers.start_prometheus(work, [f"127.0.0.1:{port}"])
        try:
            run = subprocess.Popen(
                [sys.executable, "-m", "loadtest", "run", "scenarios/poisson-sla.yml",
                 "--set", "load.duration=50s", "--set", "load.arrival.rate=15",
                 "--metrics-port", str(port), "-q", "-o", str(work / "run")],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(45)  # most of the run, live
            dashboard = json.loads((ROOT / "docker/grafana/loadtest-dashboard.json").read_text())
            expr = next(
                t["expr"]
                for p in dashboard["panels"]
                for t in p["targets"]
                if 'metric="ttft"' in t["expr"]
            )
            expr = expr.replace("$scenario", "poisson-sla").replace("$run", "run")
            query = urllib.parse.urlencode(
                {"g0.expr": expr, "g0.tab": "0", "g0.stacked": "0", "g0.range_input": "1m"}
            )
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=shutil.which("chromium"), args=["--no-sandbox"]
                )
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                page.goto(f"{prom.url}/graph?{query}")
                page.wait_for_timeout(4000)
                page.screenshot(path=str(ROOT / "docs/img/live-metrics-prometheus.png"))
                browser.close()
            run.wait(120)
        finally:
            prom.stop()


if __name__ == "__main__":
    main()
