"""The ``gpu`` section of ``metrics.json``, typed: what each device did over the measured
window (each column's distribution, energy, throttle reasons), the whole run's series for the
plots, and what sampling cost. The NVML sampler and a DCGM exporter's both return it."""

from __future__ import annotations

from typing import Protocol

from pydantic import Field

from loadtest.core.document import Section


class Dist(Section):
    """One column's distribution over the window's samples."""

    mean: float
    p50: float
    p95: float
    max: float


class GpuSeries(Section):
    """The whole run's samples, seconds from t0, for the report's plots (None: not read)."""

    t_s: list[float]
    utilization_gpu_pct: list[float | None] = Field(default_factory=list)
    power_w: list[float | None] = Field(default_factory=list)
    memory_used_mib: list[float | None] = Field(default_factory=list)
    sm_activity_pct: list[float | None] = Field(default_factory=list)


class GpuDevice(Section):
    """One device over the window (all its samples where none fell inside); a figure the
    device could not give is None (``unavailable`` says why)."""

    index: int
    name: str
    uuid: str | None = None
    host: str | None = None  # a DCGM exporter's: the host the GPU is in
    samples: int = 0
    utilization_gpu_pct: Dist | None = None  # kernel-active share (NVML "utilization")
    utilization_memory_pct: Dist | None = None
    memory_used_mib: Dist | None = None
    peak_memory_mib: float | None = None  # over the whole run
    power_w: Dist | None = None
    energy_j: float | None = None
    energy_span_s: float | None = None
    energy_integrated_j: float | None = None
    joules_per_output_token: float | None = None  # where one device did all the work
    clocks_sm_mhz: Dist | None = None
    clocks_mem_mhz: Dist | None = None
    temperature_c: Dist | None = None
    throttle_reasons_seen: list[str] = Field(default_factory=list)
    unavailable: dict[str, str] = Field(default_factory=dict)  # column -> why it was not read
    series: GpuSeries | None = None
    # GPM (Hopper and newer): how busy the SMs really were
    gpm_sm_activity_pct: Dist | None = None
    gpm_sm_occupancy_pct: Dist | None = None
    gpm_tensor_activity_pct: Dist | None = None
    gpm_dram_bw_util_pct: Dist | None = None


class SamplerCost(Section):
    """How sampling went: samples taken, reads failed, and (NVML, in this process) its CPU."""

    samples: int
    errors: int
    cpu_s: float | None = None
    wall_s: float | None = None
    cpu_pct_of_one_core: float | None = None
    cpu_ms_by_metric: dict[str, float] | None = None


class GpuSection(Section):
    """``available: false`` with the reason (and the exporter's URL, where one was asked), or
    every device's summary."""

    available: bool
    reason: str | None = None
    source: str | None = None  # a DCGM exporter; absent: NVML in this process
    scope: str | None = None  # whose GPUs these are, where that is not plain
    interval_s: float | None = None
    devices: list[GpuDevice] | None = None
    sampler: SamplerCost | None = None
    definitions: dict[str, str] | None = None

    @classmethod
    def unavailable(cls, reason: str, source: str | None = None) -> GpuSection:
        if source is None:
            return cls(available=False, reason=reason)
        return cls(available=False, reason=reason, source=source)


class GpuSource(Protocol):
    """What samples GPUs beside a run: NVML in this process (``GpuSampler``) or a DCGM
    exporter's page (``DcgmSampler``). Started before t0, stopped after the drain."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def latest_utilization(self) -> list[float] | None:
        """Each device's latest kernel-active %, for the live display."""
        ...

    def csv_text(self, t0_ns: int) -> str:
        """The samples as gpu.csv, times in seconds from t0."""
        ...

    def summary(
        self, t0_ns: int, window: tuple[int, int] | None, output_tokens: int | None
    ) -> GpuSection: ...
