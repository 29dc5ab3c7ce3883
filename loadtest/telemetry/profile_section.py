"""The ``profile`` section of ``metrics.json``, typed: the capture window on the run's clock,
the requests it touched and what it cost the run, and what the profiler exported (the trace,
the top operators and kernels of an in-process engine's torch.profiler)."""

from __future__ import annotations

from loadtest.core.document import Section


class Span(Section):
    """The capture window, seconds from t0 (None: it did not open, or did not close)."""

    start_s: float | None
    end_s: float | None


class Perturbation(Section):
    """What the capture cost: how long it lasted against what was asked, the backlog it caused,
    and when that drained (None: not by the run's end)."""

    asked_s: float | None
    lasted_s: float
    backlog_at_open: int | None
    backlog_peak: int
    drained_s: float | None
    drain_s: float | None


class Operator(Section):
    """One operator's times over the window, microseconds (its kernels' CUDA time charged to
    it as the innermost operator open at their launch)."""

    name: str
    calls: int
    cpu_time_us: float
    self_cpu_time_us: float
    self_cuda_time_us: float


class Kernel(Section):
    """One CUDA kernel over the window: its launches, time, and launches under 10 µs."""

    name: str
    cuda_calls: int
    cuda_time_us: float
    short_calls: int


class KernelSummary(Section):
    distinct: int
    launches: int
    cuda_time_us: float
    under_10us_share: float | None


class ProfileSection(Section):
    """The window and its requests always; the rest as the profiler gave it."""

    window: Span
    requests_flagged: int
    perturbation: Perturbation | None
    excluded_from_stats: bool
    profiler: str | None = None  # which one ran, or why none did
    profiled: str | None = None  # of several replicas: the one captured
    trace: str | None = None  # the Chrome trace, in the run's directory
    captured_s: float | None = None
    tensorboard: str | None = None
    export_s: float | None = None  # the export's own time, after the run
    tables_s: float | None = None
    top_ops: list[Operator] | None = None
    host_heavy_ops: list[Operator] | None = None  # host time far over their kernels'
    kernels: list[Kernel] | None = None
    kernel_summary: KernelSummary | None = None
