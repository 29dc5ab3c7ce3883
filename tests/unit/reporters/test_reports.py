"""Reports read only metrics.json / sweep.json; HTML is self-contained and escapes what users wrote."""

import json
import re

import pytest

from loadtest.reporters import html, markdown


def test_run_html_is_self_contained_and_escaped(run_virtual_fn):
    m = run_virtual_fn(
        {
            "name": "<script>alert(1)</script>",
            "backend": {"kind": "sim", "max_concurrency": 2},
            "workload": {"input_tokens": 5, "output_tokens": 4},
            "load": {"arrival": {"kind": "poisson", "rate": 20}, "duration": "5s"},
            "sla": {"ttft_p50": "1s"},
        }
    )
    page = html.run_html(json.loads(json.dumps(m)))
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert not re.search(
        r"""(src|href)\s*=\s*['"]?(https?:)?//""", page
    )  # nothing fetched from a network
    assert page.count("src='data:image/png;base64,") == 2  # percentile plot + time series
    md = markdown.render(m)
    assert "<script>" not in md and "&lt;script&gt;" in md


@pytest.mark.integration
def test_reports_show_gpu_telemetry_roofline_and_profile(tmp_path, monkeypatch):
    """GPU plot and tables from the sampled data, the profile window, the roofline; all escaped."""
    from loadtest.config.loading import load_scenario
    from loadtest.session import run_scenario
    from loadtest.telemetry import gpu_sampler
    from tests.conftest import write_scenario
    from tests.fake_nvml import FakeNVML

    monkeypatch.setattr(gpu_sampler, "load_nvml", lambda: (FakeNVML(), None))
    data = {
        "name": "inside",
        "backend": {"kind": "sim", "max_concurrency": 2, "decode_ms_per_token": 2},
        "workload": {"input_tokens": 10, "output_tokens": 10},
        "load": {"arrival": {"kind": "poisson", "rate": 40}, "duration": "1.5s"},
        "telemetry": {"interval": "50ms"},
        "profile": {"start": "0.5s", "duration": "0.5s"},
    }
    m = run_scenario(load_scenario(write_scenario(tmp_path, data)), tmp_path / "run").metrics
    m["profile"]["top_ops"] = [
        {
            "name": "aten::<mm>",
            "calls": 3,
            "self_cuda_time_us": 1.0,
            "self_cpu_time_us": 3.0,
            "cpu_time_us": 4.0,
        }
    ]
    m["roofline"] = {
        "peaks": None,
        "decode": {"step_ms": 5.0, "batch_mean": 1.0, "achieved_gb_s": 1.0},
        "diagnosis": {
            "verdict": "host/launch-bound",
            "evidence": ["x"],
            "remedies": ["CUDA graphs"],
        },
    }
    page = html.run_html(m)
    assert page.count("src='data:image/png;base64,") == 3  # + GPU over time
    assert "kernel-active" in page and "aten::&lt;mm&gt;" in page and "host/launch-bound" in page
    md = markdown.render(m)
    assert (
        "## GPU" in md
        and "## Profiler window" in md
        and "## Roofline" in md
        and "aten::&lt;mm&gt;" in md
    )
    assert "sw_power_cap" in md


def test_a_log_gets_a_plain_progress_line_every_period():
    import asyncio

    from loadtest.reporters.progress import choose, plain_progress

    class FakeRunner:
        def __init__(self):
            self.calls = 0

        def stats(self):
            self.calls += 1
            return {
                "elapsed_s": 5.0 * self.calls,
                "sent": 10 * self.calls,
                "completed": 8 * self.calls,
                "in_flight": 2,
                "failed": 0,
                "ttft_p99_ms": 12.5,
                "planned": 100,
            }

    lines: list[str] = []

    async def go():
        task = asyncio.create_task(plain_progress(0.01, lines.append)(FakeRunner()))
        while len(lines) < 2:  # bounded: the test's own timeout stops a broken loop
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(asyncio.wait_for(go(), 10))
    assert lines[1] == (
        "progress: 10 s, sent 20/100, done 16, in flight 2, failed 0, 1.6 req/s, p99 TTFT 12.5 ms"
    )
    assert choose(quiet=True, terminal=False) is None and choose(False, False) is not None
