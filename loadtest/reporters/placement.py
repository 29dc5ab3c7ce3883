"""Where a local engine ran, as label/value rows every format renders: its devices and CPUs, the
replicas and how requests were routed to them (each with its requests, batches, decode step
against the roofline's floor and peak memory), the tensor-parallel split and its all-reduce, and
the decode loop. Empty for a backend that reports none of these (a served model)."""

from __future__ import annotations

from loadtest.results.model import BackendFacts, ReplicaFacts, RooflineSection


def placement_rows(
    backend: BackendFacts | None, roofline: RooflineSection | None
) -> list[tuple[str, str]]:
    """Label/value rows of the engine's placement (see the module docstring)."""
    if backend is None:
        return []
    replicas, split = backend.replicas or [], backend.tensor_parallel
    rows: list[tuple[str, str]] = []
    floor = roofline.decode.floor_ms if roofline and roofline.decode else None
    if replicas:
        size = (split.size if split else None) or 1
        layout = f"{len(replicas)} replicas" + (f" of TP{size}" if size > 1 else "")
        rows.append(("engines", f"{layout}, routed to the {backend.routing or '?'}"))
        rows += [
            (f"replica {i if r.index is None else r.index}", _replica(r, floor))
            for i, r in enumerate(replicas)
        ]
    elif backend.cpus or split:
        cpus = backend.cpus
        rows.append(("engine", (backend.device or "?") + (f", CPUs {cpus}" if cpus else "")))
    if split:
        shape = ", ".join(f"{k} {v}" for k, v in (split.per_rank or {}).items())
        rows.append(
            ("tensor parallel", f"TP{split.size}" + (f" ({shape} a rank)" if shape else ""))
        )
        if split.all_reduce:
            rows.append(("all-reduce", split.all_reduce))
    if backend.decode_loop:
        why = backend.decode_loop_off
        rows.append(("decode loop", backend.decode_loop + (f" ({why})" if why else "")))
    return rows


def _replica(r: ReplicaFacts, floor: float | None) -> str:
    """One replica: devices, CPUs, requests, batches, decode step (against the floor), memory."""
    parts = [",".join(r.devices or ()) or "?"]
    if r.cpus:
        parts.append(f"CPUs {r.cpus}")
    if r.requests is not None:
        parts.append(f"{r.requests} requests")
    if r.batches is not None:
        parts.append(f"{r.batches} batches")
    step = r.decode_step_ms
    if step is not None:
        parts.append(
            f"decode step {step:g} ms" + (f" ({step / floor:.1f}x the floor)" if floor else "")
        )
    if r.peak_mem_mb is not None:
        parts.append(f"peak {r.peak_mem_mb:,.0f} MB")
    return "; ".join(parts)
