"""The profiler inside the engine worker, for one capture window.

torch.profiler with CPU (and CUDA, on a GPU) activities runs only between ``start`` and
``stop_capture``. Around the window, ``cudaProfilerStart/Stop`` let ``nsys profile
--capture-range=cudaProfilerApi`` and ``ncu --profile-from-start off`` capture exactly the
same span; while it is open, each batch is an annotated range (an NVTX range on CUDA, a
``record_function`` in the torch trace) named with its request ids, and on CUDA each decode step
an NVTX range too. ``export``, after the run, writes
``trace.json.gz`` (Chrome trace format: opens in Perfetto and chrome://tracing), optionally a
TensorBoard folder, and returns the top operators by self device time plus a summary of the
CUDA kernels (how many ran under 10 µs: the launch-bound signature).
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from loadtest.core import rundir

if TYPE_CHECKING:
    from torch import device as TorchDevice
    from torch._C._autograd import DeviceType, _KinetoEvent

    from loadtest.config.observing import Profile


class WorkerProfiler:
    """A torch profiler capture inside the worker, bounded by a window."""

    def __init__(self, torch: ModuleType, device: TorchDevice, options: Profile) -> None:
        self.torch, self.device, self.options = torch, device, options
        self.cuda = device.type == "cuda"
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.prof = torch.profiler.profile(
            activities=activities,
            record_shapes=options.record_shapes,
            profile_memory=options.profile_memory,
            with_stack=options.with_stack,
        )

    _steps = 0
    _step_open = False

    def start(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
            self.torch.cuda.profiler.start()  # cudaProfilerStart: nsys/ncu capture ranges
        self.prof.start()
        self.t_start = time.monotonic_ns()

    def decode_step(self) -> None:
        """Called after each decode step: on CUDA, an NVTX range per step (for nsys timelines)."""
        if self.cuda:
            if self._step_open:
                self.torch.cuda.nvtx.range_pop()
            self._steps += 1
            self.torch.cuda.nvtx.range_push(f"loadtest decode step {self._steps}")
            self._step_open = True

    def end_steps(self) -> None:
        """Close the NVTX range of the decode step in progress (on CUDA)."""
        if self.cuda and self._step_open:
            self.torch.cuda.nvtx.range_pop()
        self._step_open = False

    @contextlib.contextmanager
    def annotate(self, label: str) -> Iterator[None]:
        """A labelled region in the trace (a record_function, and an NVTX range on CUDA)."""
        torch = self.torch
        if self.cuda:
            torch.cuda.nvtx.range_push(label)
        try:
            with torch.profiler.record_function(label):
                yield
        finally:
            if self.cuda:
                torch.cuda.nvtx.range_pop()

    def stop_capture(self) -> None:
        """Stop capturing now; the trace is exported later, after the run."""
        torch = self.torch
        self.end_steps()
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.profiler.stop()
        self.prof.stop()
        self.captured_s = (time.monotonic_ns() - self.t_start) / 1e9

    def export(self, out_dir: str) -> dict:
        """The trace file and the tables (seconds of work: called after the run, not in the window)."""
        torch = self.torch
        captured_s = self.captured_s
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        t = time.monotonic()
        # torch's own .gz export compresses at level 9: minutes for a trace of a few seconds of
        # eager decode. Export plain JSON (C++, fast), then compress at level 1.
        raw = out / "trace.json"
        self.prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(out / "trace.json.gz", "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        raw.unlink()
        rundir.record(out / "trace.json.gz")
        result = {
            "profiler": f"torch.profiler ({'CPU+CUDA' if self.cuda else 'CPU'})",
            "trace": "trace.json.gz",
            "captured_s": round(captured_s, 3),
        }
        if self.options.tensorboard:
            torch.profiler.tensorboard_trace_handler(str(out / "tb"))(self.prof)
            rundir.record(out / "tb")
            result["tensorboard"] = "tb/"
        result["export_s"] = round(time.monotonic() - t, 3)
        t = time.monotonic()
        ops, kernels = op_tables(
            self.prof.profiler.kineto_results.events(), torch.autograd.DeviceType
        )
        result["tables_s"] = round(time.monotonic() - t, 3)
        key = "self_cuda_time_us" if self.cuda else "self_cpu_time_us"
        result["top_ops"] = sorted(ops, key=lambda r: r[key], reverse=True)[: self.options.top_ops]
        if self.cuda:
            # Operators whose host time dwarfs their kernels': what a host-bound step is made of
            # (they may launch too little to rank by CUDA time at all).
            result["host_heavy_ops"] = host_heavy(ops)
        launches = sum(k["cuda_calls"] for k in kernels)
        short = sum(k["short_calls"] for k in kernels)
        result["kernels"] = kernels[:50]
        result["kernel_summary"] = {
            "distinct": len(kernels),
            "launches": launches,
            "cuda_time_us": round(sum(k["cuda_time_us"] for k in kernels), 1),
            "under_10us_share": round(short / launches, 4) if launches else None,
        }
        return result


HOST_HEAVY_RATIO = 10.0  # self CPU at least this many times the op's CUDA time
HOST_HEAVY_SHARE = 0.05  # and at least this share of all operators' self CPU time


def host_heavy(ops: list[dict], limit: int = 5) -> list[dict]:
    """Operators with self CPU time far above their CUDA time and a real share of the host's
    time, the largest first."""
    total = sum(o["self_cpu_time_us"] for o in ops) or 1.0
    heavy = [
        o
        for o in ops
        if o["self_cpu_time_us"] >= HOST_HEAVY_RATIO * max(o["self_cuda_time_us"], 1.0)
        and o["self_cpu_time_us"] >= HOST_HEAVY_SHARE * total
    ]
    return sorted(heavy, key=lambda o: o["self_cpu_time_us"], reverse=True)[:limit]


def op_tables(
    events: Iterable[_KinetoEvent], device_type: type[DeviceType]
) -> tuple[list[dict], list[dict]]:
    """Operators (self CPU time, and the CUDA time of the kernels each launched) and kernels.

    Straight from the profiler's raw events: ``key_averages()`` builds a Python object tree
    first, ~50x slower (minutes for a few seconds of eager decode). CPU events nest per
    thread; a kernel is charged to the innermost operator open when its launch was issued
    (matched by correlation id), which is what "self CUDA time" means.
    """
    cpu_by_thread: dict[int, list] = defaultdict(list)
    gpu = []
    for e in events:
        if e.is_user_annotation():
            # record_function ranges, mirrored on the GPU's timeline too: a request's range
            # there spans all of its kernels, and is neither an operator nor a kernel
            continue
        if e.device_type() == device_type.CPU:
            cpu_by_thread[e.start_thread_id()].append(e)
        else:
            gpu.append(e)
    ops: dict[str, dict] = {}
    launched_by: dict[int, str] = {}

    def row(name: str) -> dict:
        r = ops.get(name)
        if r is None:
            r = ops[name] = {
                "name": name,
                "calls": 0,
                "cpu_time_us": 0.0,
                "self_cpu_time_us": 0.0,
                "self_cuda_time_us": 0.0,
            }
        return r

    for es in cpu_by_thread.values():
        es.sort(key=lambda e: (e.start_ns(), -e.duration_ns()))
        stack: list[list] = []  # [name, end_ns, duration_ns, children_ns, is_runtime]
        for e in es:
            start, dur = e.start_ns(), e.duration_ns()
            while stack and stack[-1][1] <= start:
                _close(stack, row)
            name = e.name()
            runtime = name.startswith(("cuda", "cu", "hip"))
            if runtime and e.correlation_id():
                owner = next((f[0] for f in reversed(stack) if not f[4]), name)
                launched_by[e.correlation_id()] = owner
            stack.append([name, start + dur, dur, 0, runtime])
        while stack:
            _close(stack, row)
    kernels: dict[str, dict] = {}
    for e in gpu:
        us = e.duration_ns() / 1000
        k = kernels.setdefault(
            e.name(), {"name": e.name(), "cuda_calls": 0, "cuda_time_us": 0.0, "short_calls": 0}
        )
        k["cuda_calls"] += 1
        k["cuda_time_us"] += us
        k["short_calls"] += us < 10
        owner = launched_by.get(e.correlation_id())
        if owner is not None:
            r = row(owner)
            r["self_cuda_time_us"] += us
    out = []
    for r in ops.values():
        out.append({**r, **{k: round(v, 1) for k, v in r.items() if isinstance(v, float)}})
    kern = sorted(
        ({**k, "cuda_time_us": round(k["cuda_time_us"], 1)} for k in kernels.values()),
        key=lambda k: k["cuda_time_us"],
        reverse=True,
    )
    return out, kern


def _close(stack: list[list], row: Callable[[str], dict]) -> None:
    name, _, dur, children, _ = stack.pop()
    r = row(name)
    r["calls"] += 1
    r["cpu_time_us"] += dur / 1000
    r["self_cpu_time_us"] += (dur - children) / 1000
    if stack:
        stack[-1][3] += dur
