"""Where a local engine ran, as label/value rows every format renders: its devices and CPUs, the
replicas and how requests were routed to them (each with its requests, batches, decode step
against the roofline's floor and peak memory), the tensor-parallel split and its all-reduce, and
the decode loop. Empty for a backend that reports none of these (a served model)."""

from __future__ import annotations

from typing import Any

from loadtest.results.model import BackendFacts, RooflineSection


def placement_rows(
    backend: BackendFacts | None, roofline: RooflineSection | None
) -> list[tuple[str, str]]:
    """Label/value rows of the engine's placement (see the module docstring)."""
    if backend is None:
        return []
    facts: dict[str, Any] = backend.model_extra or {}
    replicas = facts.get("replicas") or []
    split = facts.get("tensor_parallel") or {}
    rows: list[tuple[str, str]] = []
    floor = roofline.decode.floor_ms if roofline and roofline.decode else None
    if replicas:
        size = split.get("size") or 1
        layout = f"{len(replicas)} replicas" + (f" of TP{size}" if size > 1 else "")
        rows.append(("engines", f"{layout}, routed to the {facts.get('routing', '?')}"))
        rows += [
            (f"replica {r.get('index', i)}", _replica(r, floor)) for i, r in enumerate(replicas)
        ]
    elif facts.get("cpus") or split:
        where = facts.get("device") or "?"
        cpus = facts.get("cpus")
        rows.append(("engine", where + (f", CPUs {cpus}" if cpus else "")))
    if split:
        per_rank = split.get("per_rank") or {}
        shape = ", ".join(f"{k} {v}" for k, v in per_rank.items())
        rows.append(
            ("tensor parallel", f"TP{split.get('size')}" + (f" ({shape} a rank)" if shape else ""))
        )
        if split.get("all_reduce"):
            rows.append(("all-reduce", str(split["all_reduce"])))
    loop = facts.get("decode_loop")
    if loop:
        why = facts.get("decode_loop_off")
        rows.append(("decode loop", str(loop) + (f" ({why})" if why else "")))
    return rows


def _replica(r: dict[str, Any], floor: float | None) -> str:
    """One replica: devices, CPUs, requests, batches, decode step (against the floor), memory."""
    parts = [",".join(r.get("devices") or ()) or "?"]
    if r.get("cpus"):
        parts.append(f"CPUs {r['cpus']}")
    if r.get("requests") is not None:
        parts.append(f"{r['requests']} requests")
    if r.get("batches") is not None:
        parts.append(f"{r['batches']} batches")
    step = r.get("decode_step_ms")
    if step is not None:
        parts.append(
            f"decode step {step:g} ms" + (f" ({step / floor:.1f}x the floor)" if floor else "")
        )
    if r.get("peak_mem_mb") is not None:
        parts.append(f"peak {r['peak_mem_mb']:,.0f} MB")
    return "; ".join(parts)
