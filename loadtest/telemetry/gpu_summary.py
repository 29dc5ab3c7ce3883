"""The ``gpu`` section's per-device summary, from a sampler's rows: each column's distribution
over the measured window, the energy it took (the NVML counter, and power integrated over the
same span for comparison), joules per output token, and the series the report plots."""

from __future__ import annotations

import math
from typing import Any

from loadtest.telemetry.gpu_columns import GPM_METRICS, THROTTLE_REASONS


def device_summaries(
    devices: list, rows: list[dict], window: tuple[int, int] | None, t0_ns: int, tokens: int | None
) -> list[dict]:
    """Every device's entry over ``window`` (all its samples where none fall inside); joules
    per output token only where one device did all the work."""
    lo, hi = window if window else (-math.inf, math.inf)
    out = []
    for d in devices:
        own = [r for r in rows if r["index"] == d.index]
        inside = [r for r in own if lo <= r["t_ns"] <= hi] or own
        out.append(device_summary(d, own, inside, t0_ns, tokens if len(devices) == 1 else None))
    return out


def device_summary(
    d: Any, rows: list[dict], inside: list[dict], t0_ns: int, tokens: int | None
) -> dict:
    """One device's ``gpu.devices`` entry: each column's distribution over the window, energy
    and joules per output token, throttle reasons seen, and the whole run's series."""

    def stats(col: str) -> dict | None:
        return _stats([r[col] for r in inside if r.get(col) is not None])

    energy_j, span_s, integrated = _energy(inside)
    window_s = (inside[-1]["t_ns"] - inside[0]["t_ns"]) / 1e9 if len(inside) >= 2 else None
    seen = 0
    for r in inside:
        seen |= r.get("clocks_event_reasons.active") or 0
    out = {
        "index": d.index,
        "name": d.name,
        "uuid": d.uuid,
        "samples": len(inside),
        "utilization_gpu_pct": stats("utilization.gpu"),
        "utilization_memory_pct": stats("utilization.memory"),
        "memory_used_mib": stats("memory.used"),
        "peak_memory_mib": max(
            (r["memory.used"] for r in rows if r.get("memory.used") is not None), default=None
        ),
        "power_w": stats("power.draw"),
        "energy_j": _round(energy_j),
        "energy_span_s": _round(span_s),
        "energy_integrated_j": _round(integrated),
        "joules_per_output_token": _round(energy_j / span_s * window_s / tokens)
        if energy_j is not None and span_s and window_s and tokens
        else None,
        "clocks_sm_mhz": stats("clocks.sm"),
        "clocks_mem_mhz": stats("clocks.mem"),
        "temperature_c": stats("temperature.gpu"),
        "throttle_reasons_seen": [name for bit, name in THROTTLE_REASONS.items() if seen & bit],
        "unavailable": dict(d.unsupported),
        "series": {
            "t_s": [round((r["t_ns"] - t0_ns) / 1e9, 3) for r in rows],
            **{
                k: [r.get(c) for r in rows]
                for k, c in (
                    ("utilization_gpu_pct", "utilization.gpu"),
                    ("power_w", "power.draw"),
                    ("memory_used_mib", "memory.used"),
                    ("sm_activity_pct", "gpm.sm_activity"),
                )
            },
        },
    }
    for name in GPM_METRICS:
        out[name.replace("gpm.", "gpm_") + "_pct"] = stats(name)
    return out


def _stats(values: list[float]) -> dict | None:
    vals = sorted(values)
    if not vals:
        return None
    pick = lambda q: vals[min(len(vals) - 1, int(q * len(vals)))]  # noqa: E731
    return {
        "mean": round(sum(vals) / len(vals), 3),
        "p50": pick(0.5),
        "p95": pick(0.95),
        "max": vals[-1],
    }


def _energy(inside: list[dict]) -> tuple[float | None, float | None, float | None]:
    """The counter's difference between its first and last reading in the window, that span,
    and power integrated over exactly that span, for comparison."""
    energy = [r for r in inside if r.get("energy") is not None]
    if len(energy) < 2:
        return None, None, None
    lo_t, hi_t = energy[0]["t_ns"], energy[-1]["t_ns"]
    energy_j, span_s = energy[-1]["energy"] - energy[0]["energy"], (hi_t - lo_t) / 1e9
    power = [
        (r["t_ns"], r["power.draw"])
        for r in inside
        if r.get("power.draw") is not None and lo_t <= r["t_ns"] <= hi_t
    ]
    integrated = None
    if len(power) >= 2:
        integrated = sum(
            (t2 - t1) / 1e9 * (p1 + p2) / 2 for (t1, p1), (t2, p2) in zip(power, power[1:])
        )
    return energy_j, span_s, integrated


def _round(x):
    return None if x is None else float(f"{x:.6g}")
