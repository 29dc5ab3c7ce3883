"""A DCGM exporter's page as GPU telemetry: fields mapped to the NVML sampler's columns with
their units converted, a device a label set, and the same summary (energy, joules a token)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loadtest.telemetry.dcgm import DcgmSampler, parse_page


def page(util: float, energy_mj: float, used: float = 1000.0) -> str:
    labels = 'gpu="{g}",UUID="GPU-{g}",device="nvidia{g}",modelName="NVIDIA H100",Hostname="h1"'
    lines = [
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    ]
    for g in (0, 1):
        lab = labels.format(g=g)
        lines += [
            f"DCGM_FI_DEV_GPU_UTIL{{{lab}}} {util + g}",
            f"DCGM_FI_DEV_FB_USED{{{lab}}} {used}",
            f"DCGM_FI_DEV_POWER_USAGE{{{lab}}} 300.5",
            f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{lab}}} {energy_mj}",
            f"DCGM_FI_PROF_SM_ACTIVE{{{lab}}} 0.25",
            f"DCGM_FI_DEV_XID_ERRORS{{{lab}}} 0",
        ]
    return "\n".join(lines) + "\n"


def test_a_page_maps_each_gpu_to_the_samplers_columns_in_their_units():
    out = parse_page(page(50, 2_000_000))
    assert sorted(out) == [(0, "GPU-0", "NVIDIA H100", "h1"), (1, "GPU-1", "NVIDIA H100", "h1")]
    gpu0 = out[(0, "GPU-0", "NVIDIA H100", "h1")]
    assert gpu0 == {
        "utilization.gpu": 50.0,
        "memory.used": 1000.0,
        "power.draw": 300.5,
        "energy": 2000.0,  # mJ -> J
        "gpm.sm_activity": 25.0,  # a fraction -> %
    }


class _Exporter(BaseHTTPRequestHandler):
    pages: list[str] = []

    def do_GET(self):
        body = (self.pages.pop(0) if len(self.pages) > 1 else self.pages[0]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def exporter():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()


def test_the_sampler_gives_the_gpu_section_with_energy_from_its_counter(exporter):
    _Exporter.pages = [page(40, 1_000_000), page(60, 1_500_000), page(80, 2_500_000)]
    s = DcgmSampler(exporter, interval_s=0.05)
    s._sample(), s._sample(), s._sample()  # three reads, by hand: the thread is not needed
    out = s.summary(0, None, output_tokens=1000)
    assert out.available and out.source == f"DCGM exporter {exporter}"
    d0, d1 = out.devices
    assert (d0.index, d0.name, d0.uuid, d0.host) == (0, "NVIDIA H100", "GPU-0", "h1")
    assert d0.utilization_gpu_pct.mean == 60.0 and d1.utilization_gpu_pct.mean == 61.0
    assert d0.energy_j == 1500.0  # 2,500,000 - 1,000,000 mJ since the first reading
    assert d0.joules_per_output_token is None  # two GPUs: no one device's share of the tokens
    assert s.csv_text(0).splitlines()[0].startswith("timestamp_ns,t_s,index,utilization.gpu [%]")


def test_an_exporter_that_does_not_answer_leaves_the_section_unavailable():
    s = DcgmSampler("http://127.0.0.1:9/metrics", interval_s=0.05, timeout_s=0.5)
    s.start()
    s.stop()
    out = s.summary(0, None, None)
    assert out.available is False and "gave no GPU sample" in out.reason
