"""GPU telemetry beside the latencies: NVML sampled from a thread, on the run's clock.

Every ``interval`` (default 250 ms) from t0 to the end of the drain, per device: kernel-active
fraction (what NVML calls "GPU utilization": the share of time *any* kernel was running, not how
busy the SMs were), memory-activity fraction, memory used, power, the energy counter, SM and
memory clocks, temperature, clocks-event (throttle) reasons, PCIe throughput, and on Hopper and
newer the GPM metrics (SM activity, SM occupancy, tensor activity, DRAM bandwidth utilisation),
which say how busy the SMs really were. PCIe throughput, which NVML measures over 20 ms per call,
and the energy counter, which costs milliseconds of CPU per read, are read every 4th tick. Each sample carries ``time.monotonic_ns()``, the clock
the latencies use.

Nothing here may fail a run: no NVML, no GPU, a metric the device does not support, or an error
mid-run each leave the value empty and say why. The running-process APIs are never polled here
(they are slow and take locks); the environment manifest reads them once, at start. The thread's
own CPU time is measured and reported.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from loadtest.telemetry.gpu_columns import (
    GPM_METRICS,
    SLOW_COLUMNS,
    SLOW_EVERY,
    latest_utilization,
    samples_csv,
)
from loadtest.telemetry.gpu_section import GpuSection, SamplerCost
from loadtest.telemetry.gpu_summary import Row, device_summaries

T = TypeVar("T")
# pynvml (nvidia-ml-py) ships no type information: its module and handles are Any here, and
# what is read from them is typed where it lands (a sample's row, a device's name).
Nvml = Any


def load_nvml() -> tuple[Nvml, str | None]:
    """The ``pynvml`` module (nvidia-ml-py) initialised, or ``(None, reason)``."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML unavailable: {exc}"
    return pynvml, None


@dataclass
class DeviceState:
    """One GPU's NVML handle, its samples, and the metrics it cannot give."""

    index: int
    handle: object
    name: str
    uuid: str | None
    unsupported: dict[str, str] = field(default_factory=dict)  # column -> why
    energy0_mj: float | None = None
    gpm_samples: list[Any] | None = None  # NVML's two GPM sample buffers


class GpuSampler:
    """Start before t0, stop after the drain; ``rows`` then holds one dict per device per tick."""

    def __init__(
        self,
        interval_s: float = 0.25,
        nvml: Nvml = None,
        devices: list[int] | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.interval_s, self._nvml, self._wanted, self.clock = interval_s, nvml, devices, clock
        self.devices: list[DeviceState] = []
        self.rows: list[Row] = []
        self.errors = 0
        self.unavailable: str | None = None
        self.cpu_s = self.wall_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._owns_nvml = False
        self._ticks = 0
        self.cpu_by_column: dict[str, float] = {}  # where the sampler's own CPU time goes

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        nvml = self._nvml
        if nvml is None:
            nvml, reason = load_nvml()
            if nvml is None:
                self.unavailable = reason
                return
            self._nvml, self._owns_nvml = nvml, True
        try:
            count = nvml.nvmlDeviceGetCount()
            indices = [
                i for i in (self._wanted if self._wanted is not None else range(count)) if i < count
            ]
            for i in indices:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                self.devices.append(
                    DeviceState(
                        i,
                        h,
                        nvml_text(try_nvml(nvml.nvmlDeviceGetName, h)) or f"GPU {i}",
                        nvml_text(try_nvml(nvml.nvmlDeviceGetUUID, h)),
                    )
                )
        except Exception as exc:
            self.unavailable = f"NVML device enumeration failed: {exc}"
            return
        if not self.devices:
            self.unavailable = "no NVIDIA GPU visible to NVML"
            return
        for d in self.devices:
            self._setup_gpm(d)
        self._thread = threading.Thread(target=self._loop, name="loadtest-gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for d in self.devices:
            for s in d.gpm_samples or ():
                try_nvml(self._nvml.nvmlGpmSampleFree, s)
        if self._owns_nvml:
            try_nvml(self._nvml.nvmlShutdown)  # NVML counts inits: this undoes ours only

    # -- the loop ---------------------------------------------------------------------------

    def _loop(self) -> None:
        cpu0, wall0 = time.thread_time(), time.monotonic()
        next_t = time.monotonic()
        while not self._stop.is_set():
            self._tick()
            next_t += self.interval_s
            self._stop.wait(max(0.0, next_t - time.monotonic()))
        self._tick()  # the end of the drain
        self.cpu_s, self.wall_s = time.thread_time() - cpu0, time.monotonic() - wall0

    def _tick(self) -> None:
        t = self.clock()
        self._ticks += 1
        slow_due = self._ticks % SLOW_EVERY == 1
        for d in self.devices:
            row: Row = {"t_ns": t, "index": d.index}
            for column, reader in self._readers():
                if column in d.unsupported or (column in SLOW_COLUMNS and not slow_due):
                    continue
                c0 = time.thread_time()
                try:
                    row.update(reader(d))
                except Exception as exc:
                    if _is_not_supported(exc):
                        d.unsupported[column] = "not supported on this device"
                    else:
                        self.errors += 1  # transient: this sample lacks the value
                finally:
                    self.cpu_by_column[column] = (
                        self.cpu_by_column.get(column, 0.0) + time.thread_time() - c0
                    )
            self.rows.append(row)

    def _readers(self) -> tuple[tuple[str, Callable[[DeviceState], Row]], ...]:
        nvml = self._nvml
        return (
            ("utilization.gpu", lambda d: _util(nvml.nvmlDeviceGetUtilizationRates(d.handle))),
            (
                "memory.used",
                lambda d: {"memory.used": nvml.nvmlDeviceGetMemoryInfo(d.handle).used / 2**20},
            ),
            ("power.draw", lambda d: {"power.draw": nvml.nvmlDeviceGetPowerUsage(d.handle) / 1000}),
            ("energy", lambda d: {"energy": self._energy(d)}),
            (
                "clocks.sm",
                lambda d: {"clocks.sm": nvml.nvmlDeviceGetClockInfo(d.handle, nvml.NVML_CLOCK_SM)},
            ),
            (
                "clocks.mem",
                lambda d: {
                    "clocks.mem": nvml.nvmlDeviceGetClockInfo(d.handle, nvml.NVML_CLOCK_MEM)
                },
            ),
            (
                "temperature.gpu",
                lambda d: {
                    "temperature.gpu": nvml.nvmlDeviceGetTemperature(
                        d.handle, nvml.NVML_TEMPERATURE_GPU
                    )
                },
            ),
            (
                "clocks_event_reasons.active",
                lambda d: {"clocks_event_reasons.active": self._reasons(d)},
            ),
            (
                "pcie.tx",
                lambda d: {
                    "pcie.tx": nvml.nvmlDeviceGetPcieThroughput(
                        d.handle, nvml.NVML_PCIE_UTIL_TX_BYTES
                    )
                },
            ),
            (
                "pcie.rx",
                lambda d: {
                    "pcie.rx": nvml.nvmlDeviceGetPcieThroughput(
                        d.handle, nvml.NVML_PCIE_UTIL_RX_BYTES
                    )
                },
            ),
            ("gpm", self._gpm),
        )

    def _energy(self, d: DeviceState) -> float:
        """Joules since the sampler started (the counter is mJ since the driver loaded)."""
        mj = self._nvml.nvmlDeviceGetTotalEnergyConsumption(d.handle)
        if d.energy0_mj is None:
            d.energy0_mj = mj
        return float(mj - d.energy0_mj) / 1000

    def _reasons(self, d: DeviceState) -> int:
        nvml = self._nvml
        fn = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return int(fn(d.handle))

    # -- GPM (Hopper and newer): metrics between two samples ----------------------------------

    def _setup_gpm(self, d: DeviceState) -> None:
        nvml = self._nvml
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(d.handle).isSupportedDevice:
                raise RuntimeError("not supported")
            d.gpm_samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
            nvml.nvmlGpmSampleGet(d.handle, d.gpm_samples[0])
        except Exception:
            d.gpm_samples = None
            d.unsupported["gpm"] = "GPM metrics need a Hopper or newer GPU (and driver support)"

    def _gpm(self, d: DeviceState) -> Row:
        nvml = self._nvml
        assert d.gpm_samples is not None  # only sampled where allocated
        prev, cur = d.gpm_samples
        nvml.nvmlGpmSampleGet(d.handle, cur)
        get = nvml.c_nvmlGpmMetricsGet_t()
        get.version = nvml.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(GPM_METRICS)
        get.sample1, get.sample2 = prev, cur
        for i, metric_id in enumerate(GPM_METRICS.values()):
            get.metrics[i].metricId = metric_id
        nvml.nvmlGpmMetricsGet(get)
        d.gpm_samples = [cur, prev]
        # A metric NVML could not compute for this pair of samples is missing from this row;
        # that includes NaN or infinite values (rates over a too-short interval)
        return {
            name: (
                v
                if get.metrics[i].nvmlReturn == 0 and math.isfinite(v := get.metrics[i].value)
                else None
            )
            for i, name in enumerate(GPM_METRICS)
        }

    # -- results ----------------------------------------------------------------------------

    def latest_utilization(self) -> list[float] | None:
        """Each device's latest kernel-active %, for the live display (None before a sample)."""
        return latest_utilization(self.rows, len(self.devices))

    def csv_text(self, t0_ns: int) -> str:
        """The samples as CSV, times in seconds from t0 (gpu.csv)."""
        return samples_csv(self.rows, t0_ns)

    def summary(
        self, t0_ns: int, window: tuple[int, int] | None, output_tokens: int | None
    ) -> GpuSection:
        """The ``gpu`` section of metrics.json: per device, over the measured window."""
        if self.unavailable:
            return GpuSection.unavailable(self.unavailable)
        return GpuSection(
            available=True,
            interval_s=self.interval_s,
            devices=device_summaries(self.devices, self.rows, window, t0_ns, output_tokens),
            sampler=SamplerCost(
                samples=len(self.rows),
                errors=self.errors,
                cpu_s=round(self.cpu_s, 4),
                wall_s=round(self.wall_s, 3),
                cpu_pct_of_one_core=round(100 * self.cpu_s / self.wall_s, 3)
                if self.wall_s
                else None,
                cpu_ms_by_metric={
                    k: round(1e3 * v, 2) for k, v in sorted(self.cpu_by_column.items())
                },
            ),
            definitions={
                "utilization.gpu": "share of the sample period in which any kernel was running (NVML): "
                "not SM occupancy; a single small kernel counts as 100%",
                "gpm.sm_activity": "share of SMs busy (Hopper+): how much of the GPU the kernels used",
                "energy_j": "NVML energy counter difference between its first and last reading in the window "
                "(read every 4th sample: energy_span_s)",
                "energy_integrated_j": "power samples integrated (trapezoids) over the same span, for comparison",
                "joules_per_output_token": "energy_j / energy_span_s x window length / output tokens in the window",
            },
        )


def _util(u: Any) -> Row:
    return {"utilization.gpu": u.gpu, "utilization.memory": u.memory}


def try_nvml(fn: Callable[..., T], *args: object) -> T | None:
    """An NVML call whose failure means "not available", never an error."""
    try:
        return fn(*args)
    except Exception:
        return None


def nvml_text(x: object) -> str | None:
    """NVML strings are bytes in older nvidia-ml-py releases."""
    return x.decode() if isinstance(x, bytes) else None if x is None else str(x)


def _is_not_supported(exc: Exception) -> bool:
    value = getattr(exc, "value", None)
    return value == 3 or "Not Supported" in str(exc)  # NVML_ERROR_NOT_SUPPORTED
