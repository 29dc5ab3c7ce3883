"""What the GPU sampler reads from NVML: its columns and units (gpu.csv's, in order), the GPM
metrics, the columns read only every few ticks, and the clock-event reasons that mean the GPU
was held back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# (column, unit) in the order of gpu.csv; names follow `nvidia-smi --query-gpu` where one exists.
COLUMNS = (
    ("utilization.gpu", "%"),
    ("utilization.memory", "%"),
    ("memory.used", "MiB"),
    ("power.draw", "W"),
    ("energy", "J"),
    ("clocks.sm", "MHz"),
    ("clocks.mem", "MHz"),
    ("temperature.gpu", "C"),
    ("clocks_event_reasons.active", "bitmask"),
    ("pcie.tx", "KB/s"),
    ("pcie.rx", "KB/s"),
    ("gpm.sm_activity", "%"),
    ("gpm.sm_occupancy", "%"),
    ("gpm.tensor_activity", "%"),
    ("gpm.dram_bw_util", "%"),
)
GPM_METRICS = {
    "gpm.sm_activity": 2,
    "gpm.sm_occupancy": 3,
    "gpm.tensor_activity": 5,
    "gpm.dram_bw_util": 10,
}
# Costly reads, every 4th tick only: NVML measures PCIe throughput over a 20 ms window per call,
# and the energy counter is the sampler's most expensive read (docs/benchmarks.md). The energy
# counter is cumulative, so reading it less often loses nothing but edge resolution.
SLOW_COLUMNS = {"pcie.tx", "pcie.rx", "energy"}
SLOW_EVERY = 4
# Clocks-event reasons that mean the measurement is suspect (idle and app-clock settings are not).
THROTTLE_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x10: "sync_boost",
}


def samples_csv(rows: Sequence[Mapping[str, float | None]], t0_ns: int) -> str:
    """A sampler's rows as ``gpu.csv``: times in seconds from t0, a column each, empty where a
    sample lacks one."""
    header = ["timestamp_ns", "t_s", "index"] + [f"{c} [{u}]" for c, u in COLUMNS]
    lines = [",".join(header)]
    for r in rows:
        t_ns = int(r["t_ns"] or 0)
        cells = [str(t_ns), f"{(t_ns - t0_ns) / 1e9:.3f}", str(r["index"])]
        for c, _ in COLUMNS:
            v = r.get(c)
            cells.append(
                ""
                if v is None
                else (hex(int(v)) if c == "clocks_event_reasons.active" else f"{v:.6g}")
            )
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


def latest_utilization(
    rows: Sequence[Mapping[str, float | None]], devices: int
) -> list[float] | None:
    """Each device's latest kernel-active %, for the live display (None before a sample)."""
    latest: dict[int, float] = {}
    for row in reversed(rows[-4 * max(1, devices) :]):
        util, index = row.get("utilization.gpu"), row.get("index")
        if util is not None and index is not None:
            latest.setdefault(int(index), util)
    return [latest[i] for i in sorted(latest)] or None
