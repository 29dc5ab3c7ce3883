"""``loadtest calibrate``: this device's real peaks, measured once and cached for the roofline.

Copy bandwidth: a large device-to-device copy (bytes read + bytes written over the time), best of
several. Matmul rate: square bf16 matmuls on CUDA (float32 on the CPU), 2 n^3 FLOPs each, best of
several. The best run is the closest to the hardware's ceiling, which is what a utilisation is
measured against. Cached in ``~/.cache/loadtest/calibration.json`` under the GPU's UUID and name.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from loadtest.core import atomic, outside
from loadtest.telemetry.roofline import CACHE_BYTES, DATASHEET_PEAKS, calibration_path


class Peaks(BaseModel):
    bw_gb_s: float
    tflops: float


class Calibration(BaseModel):
    """A device's copy bandwidth and matmul rate as measured, beside its datasheet's."""

    device_name: str
    uuid: str | None
    dtype: str
    bw_gb_s: float
    tflops: float
    measured_at: str
    datasheet: Peaks | None


def measure(device: str = "auto", repeats: int = 10) -> Calibration:
    """This device's copy bandwidth and matmul rate, measured now."""
    import torch

    from loadtest.backends.transformers.loading import resolve_device

    dev = resolve_device(device)
    cuda = dev.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    size = (1 << 30) if cuda else (1 << 27)  # bytes per buffer
    n = 8192 if cuda else 1024

    def timed(fn: Callable[[], object]) -> float:
        fn()  # warm up
        best = float("inf")
        for _ in range(repeats):
            if cuda:
                torch.cuda.synchronize(dev)
            t = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize(dev)
            best = min(best, time.perf_counter() - t)
        return best

    src = torch.empty(size // 2, dtype=torch.bfloat16 if cuda else torch.float16, device=dev)
    dst = torch.empty_like(src)
    copy_s = timed(lambda: dst.copy_(src))
    a = torch.randn(n, n, dtype=dtype, device=dev)
    b = torch.randn(n, n, dtype=dtype, device=dev)
    mm_s = timed(lambda: torch.mm(a, b))
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    uuid = None
    if cuda:
        uuid = str(getattr(torch.cuda.get_device_properties(dev), "uuid", "") or "") or None
        uuid = uuid if uuid is None or uuid.startswith("GPU-") else f"GPU-{uuid}"
    return Calibration(
        device_name=name,
        uuid=uuid,
        dtype=str(dtype).removeprefix("torch."),
        bw_gb_s=round(2 * size / copy_s / 1e9, 1),
        tflops=round(2 * n**3 / mm_s / 1e12, 2),
        measured_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        datasheet=next(
            (Peaks(bw_gb_s=bw, tflops=tf) for frag, bw, tf in DATASHEET_PEAKS if frag in name),
            None,
        ),
    )


def save(result: Calibration) -> Path:
    """Cache a calibration where the roofline looks for this device's peaks; returns the path."""
    path = calibration_path()
    try:
        cache = json.loads(outside.read_text(path, CACHE_BYTES))
    except (OSError, ValueError):
        cache = {}
    for key in {result.uuid, result.device_name} - {None}:
        cache[key] = result.model_dump()
    atomic.write_json(path, cache)
    return path
