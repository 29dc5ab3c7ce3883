"""The ``gpu`` section's per-device summary, from a sampler's rows: each column's distribution
over the measured window, the energy it took (the NVML counter, and power integrated over the
same span for comparison), joules per output token, and the series the report plots."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from loadtest.telemetry.gpu_columns import THROTTLE_REASONS
from loadtest.telemetry.gpu_section import Dist, GpuDevice, GpuSeries

# One sample of one device: ``t_ns`` and ``index``, then each column read (gpu.csv's names);
# a column that could not be read is missing or None.
Row = dict[str, float | None]


class SampledDevice(Protocol):
    """What a sampler knows of a device (NVML's or a DCGM exporter's)."""

    index: int
    name: str
    uuid: str | None
    unsupported: dict[str, str]  # column -> why it is not read


def device_summaries(
    devices: Sequence[SampledDevice],
    rows: list[Row],
    window: tuple[int, int] | None,
    t0_ns: int,
    tokens: int | None,
) -> list[GpuDevice]:
    """Every device's entry over ``window`` (all its samples where none fall inside); joules
    per output token only where one device did all the work."""
    lo, hi = window if window else (-math.inf, math.inf)
    out = []
    for d in devices:
        own = [r for r in rows if r["index"] == d.index]
        inside = [r for r in own if lo <= _t(r) <= hi] or own
        out.append(device_summary(d, own, inside, t0_ns, tokens if len(devices) == 1 else None))
    return out


def device_summary(
    d: SampledDevice, rows: list[Row], inside: list[Row], t0_ns: int, tokens: int | None
) -> GpuDevice:
    """One device's ``gpu.devices`` entry: each column's distribution over the window, energy
    and joules per output token, throttle reasons seen, and the whole run's series."""

    def stats(col: str) -> Dist | None:
        return _stats([v for r in inside if (v := r.get(col)) is not None and math.isfinite(v)])

    energy_j, span_s, integrated = _energy(inside)
    window_s = (_t(inside[-1]) - _t(inside[0])) / 1e9 if len(inside) >= 2 else None
    seen = 0
    for r in inside:
        seen |= int(r.get("clocks_event_reasons.active") or 0)
    return GpuDevice(
        index=d.index,
        name=d.name,
        uuid=d.uuid,
        samples=len(inside),
        utilization_gpu_pct=stats("utilization.gpu"),
        utilization_memory_pct=stats("utilization.memory"),
        memory_used_mib=stats("memory.used"),
        peak_memory_mib=max(
            (v for r in rows if (v := r.get("memory.used")) is not None), default=None
        ),
        power_w=stats("power.draw"),
        energy_j=_round(energy_j),
        energy_span_s=_round(span_s),
        energy_integrated_j=_round(integrated),
        joules_per_output_token=_round(energy_j / span_s * window_s / tokens)
        if energy_j is not None and span_s and window_s and tokens
        else None,
        clocks_sm_mhz=stats("clocks.sm"),
        clocks_mem_mhz=stats("clocks.mem"),
        temperature_c=stats("temperature.gpu"),
        throttle_reasons_seen=[name for bit, name in THROTTLE_REASONS.items() if seen & bit],
        unavailable=dict(d.unsupported),
        series=GpuSeries(
            t_s=[round((_t(r) - t0_ns) / 1e9, 3) for r in rows],
            utilization_gpu_pct=[r.get("utilization.gpu") for r in rows],
            power_w=[r.get("power.draw") for r in rows],
            memory_used_mib=[r.get("memory.used") for r in rows],
            sm_activity_pct=[r.get("gpm.sm_activity") for r in rows],
        ),
        gpm_sm_activity_pct=stats("gpm.sm_activity"),
        gpm_sm_occupancy_pct=stats("gpm.sm_occupancy"),
        gpm_tensor_activity_pct=stats("gpm.tensor_activity"),
        gpm_dram_bw_util_pct=stats("gpm.dram_bw_util"),
    )


def _t(row: Row) -> int:
    return int(row["t_ns"] or 0)


def _stats(values: list[float]) -> Dist | None:
    vals = sorted(values)
    if not vals:
        return None

    def pick(q: float) -> float:
        return vals[min(len(vals) - 1, int(q * len(vals)))]

    return Dist(mean=round(sum(vals) / len(vals), 3), p50=pick(0.5), p95=pick(0.95), max=vals[-1])


def _energy(inside: list[Row]) -> tuple[float | None, float | None, float | None]:
    """The counter's difference between its first and last reading in the window, that span,
    and power integrated over exactly that span, for comparison."""
    energy = [(_t(r), e) for r in inside if (e := r.get("energy")) is not None]
    if len(energy) < 2:
        return None, None, None
    (lo_t, e0), (hi_t, e1) = energy[0], energy[-1]
    energy_j, span_s = e1 - e0, (hi_t - lo_t) / 1e9
    power = [
        (_t(r), p)
        for r in inside
        if (p := r.get("power.draw")) is not None and lo_t <= _t(r) <= hi_t
    ]
    integrated = None
    if len(power) >= 2:
        integrated = sum(
            (t2 - t1) / 1e9 * (p1 + p2) / 2 for (t1, p1), (t2, p2) in zip(power, power[1:])
        )
    return energy_j, span_s, integrated


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.6g}")
