"""GPU telemetry of a remote server, from an NVIDIA DCGM exporter's Prometheus ``/metrics``
(``telemetry.dcgm: URL``): the same columns, summary and ``gpu.csv`` as the local NVML sampler,
so a served run has utilisation, memory, power and joules per output token like a local one.

The exporter's default fields are mapped to the NVML sampler's columns (units converted: DCGM
reports energy in mJ since the driver loaded, profiling activities as fractions); each GPU is a
label set (``gpu``, ``UUID``, ``modelName``). The page is read on a thread, every ``interval``,
stamped with ``time.monotonic_ns()``: the run's clock. DCGM itself samples its fields on its own
period (the exporter's ``-c``, 30 s by default; set it near the scenario's interval), so values
may repeat between its updates. Nothing here fails a run: an exporter that does not answer
leaves the section unavailable with the reason.
"""

from __future__ import annotations

import math
import re
import threading
import time
from dataclasses import dataclass, field

from loadtest.core.secrets import redact_url
from loadtest.telemetry.gpu_columns import latest_utilization, samples_csv
from loadtest.telemetry.gpu_section import GpuSection, SamplerCost
from loadtest.telemetry.gpu_summary import Row, device_summaries
from loadtest.transport.calls import scrape
from loadtest.transport.settings import ClientSettings

# DCGM field -> (the sampler's column, factor to its unit)
FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilization.gpu", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("utilization.memory", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory.used", 1.0),  # MiB
    "DCGM_FI_DEV_POWER_USAGE": ("power.draw", 1.0),  # W
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy", 1e-3),  # mJ -> J
    "DCGM_FI_DEV_SM_CLOCK": ("clocks.sm", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("clocks.mem", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature.gpu", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("gpm.sm_activity", 100.0),  # fraction -> %
    "DCGM_FI_PROF_SM_OCCUPANCY": ("gpm.sm_occupancy", 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("gpm.tensor_activity", 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("gpm.dram_bw_util", 100.0),
}
MAX_PAGE = 8 << 20
_LINE = re.compile(r"^(DCGM_FI_[A-Z0-9_]+)\{([^}]*)\}\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass
class DcgmDevice:
    """One GPU the exporter reports, as the summary reads a device."""

    index: int
    name: str
    uuid: str | None
    host: str | None = None
    unsupported: dict[str, str] = field(default_factory=dict)
    energy0_j: float | None = None


# A GPU as the exporter labels it: (gpu, UUID, modelName, Hostname).
GpuKey = tuple[int, str | None, str | None, str | None]


def parse_page(text: str) -> dict[GpuKey, dict[str, float]]:
    """An exporter page -> ``{(gpu, UUID, modelName, Hostname): {column: value}}``."""
    out: dict[GpuKey, dict[str, float]] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None or m.group(1) not in FIELDS:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        labels = dict(_LABEL.findall(m.group(2)))
        try:
            gpu = int(labels.get("gpu", "0"))
        except ValueError:
            continue
        key = (gpu, labels.get("UUID"), labels.get("modelName"), labels.get("Hostname"))
        column, factor = FIELDS[m.group(1)]
        out.setdefault(key, {})[column] = value * factor
    return out


class DcgmSampler:
    """Reads ``url`` every ``interval_s`` on its own thread: ``rows`` as the NVML sampler's."""

    def __init__(
        self,
        url: str,
        interval_s: float = 1.0,
        timeout_s: float = 2.0,
        settings: ClientSettings | None = None,
    ) -> None:
        self.url, self.interval_s, self.timeout_s = url, interval_s, timeout_s
        # the run's TLS and proxy; its headers only where the exporter is the server's origin
        self.settings = settings or ClientSettings()
        self.devices: list[DcgmDevice] = []
        self.rows: list[Row] = []
        self.errors = 0
        self.last_error: str | None = None
        self.unavailable: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="loadtest-dcgm")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout_s + self.interval_s + 1)
        if not self.rows:
            self.unavailable = f"the DCGM exporter at {redact_url(self.url)} gave no GPU sample" + (
                f" ({self.last_error})" if self.last_error else ""
            )

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            self._sample()
            next_t += self.interval_s
            self._stop.wait(max(0.0, next_t - time.monotonic()))
        self._sample()  # the end of the drain

    def _sample(self) -> None:
        t = time.monotonic_ns()
        raw, why = scrape(self.settings, self.url, MAX_PAGE, self.timeout_s)
        if raw is None:
            self.errors += 1
            self.last_error = why
            return
        page = raw.decode("utf-8", "replace")
        for (gpu, uuid, model, host), values in sorted(parse_page(page).items(), key=_by_gpu):
            device = self._device(gpu, uuid, model, host)
            row: Row = {"t_ns": t, "index": device.index, **values}
            if "energy" in values:  # joules since the sampler started, as the NVML sampler's
                if device.energy0_j is None:
                    device.energy0_j = values["energy"]
                row["energy"] = values["energy"] - device.energy0_j
            self.rows.append(row)

    def _device(
        self, gpu: int, uuid: str | None, model: str | None, host: str | None
    ) -> DcgmDevice:
        for d in self.devices:
            if d.index == gpu and d.uuid == uuid and d.host == host:
                return d
        d = DcgmDevice(gpu, model or f"GPU {gpu}", uuid, host)
        self.devices.append(d)
        return d

    def latest_utilization(self) -> list[float] | None:
        return latest_utilization(self.rows, len(self.devices))

    def csv_text(self, t0_ns: int) -> str:
        """The samples as gpu.csv (the NVML sampler's columns; those DCGM lacks are empty)."""
        return samples_csv(self.rows, t0_ns)

    def summary(
        self, t0_ns: int, window: tuple[int, int] | None, output_tokens: int | None
    ) -> GpuSection:
        """The ``gpu`` section, as the NVML sampler's, with the exporter as its source."""
        if self.unavailable:
            return GpuSection.unavailable(redact_url(self.unavailable), redact_url(self.url))
        devices = device_summaries(self.devices, self.rows, window, t0_ns, output_tokens)
        for entry, d in zip(devices, self.devices):
            entry.host = d.host
        return GpuSection(
            available=True,
            source=f"DCGM exporter {redact_url(self.url)}",
            interval_s=self.interval_s,
            devices=devices,
            sampler=SamplerCost(samples=len(self.rows), errors=self.errors),
            definitions={
                "utilization.gpu": "DCGM_FI_DEV_GPU_UTIL: share of time a kernel was running",
                "gpm.sm_activity": "DCGM_FI_PROF_SM_ACTIVE: share of SMs busy",
                "energy_j": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION difference across the window",
                "joules_per_output_token": "energy_j / energy_span_s x window length / output "
                "tokens in the window",
            },
        )


def _by_gpu(item: tuple[GpuKey, dict[str, float]]) -> tuple[str, int, str]:
    (gpu, uuid, _model, host), _ = item
    return (host or "", gpu, uuid or "")
