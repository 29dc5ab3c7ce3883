"""The typed result documents: ``metrics.json``, ``repeat.json``, ``sweep.json`` and a gate's verdict.

Every document is written with ``model_dump_json`` and read back with ``model_validate_json``
(``read_run``), so a file that does not fit is refused with the field that does not, never
half-read. ``schema`` names the document and its major version; a file of another version gets
a clear message instead of a misreading. Sections that describe the outside world in its own
terms (the scenario, the environment, the backend's facts, GPU telemetry, the profile and the
roofline) stay open mappings; everything loadtest computes is typed.

``base`` holds what they share, ``run`` one run's document, ``sets`` the documents about several
runs, ``reading`` the readers; this package is their one import.
"""

from loadtest.results.model.base import (
    HEADLINE,
    REPEAT_SCHEMA,
    RUN_SCHEMA,
    SWEEP_SCHEMA,
    RunStatus,
    SweepStatus,
    VerdictName,
)
from loadtest.results.model.reading import ResultReadError, read_repeat, read_run, read_sweep
from loadtest.results.model.run import (
    ApiResult,
    BackendFacts,
    Check,
    GoodputResult,
    Harness,
    IntervalPoint,
    Knee,
    LatencySummary,
    MediaSent,
    Requests,
    RunMetrics,
    SessionsResult,
    Stability,
    StepResult,
    StepsResult,
    StructuredChecks,
    Throughput,
    Timeseries,
    ToolCallChecks,
    Trend,
    TurnStats,
    Validity,
    Verdict,
    Window,
    WorkerClock,
    WorkerStats,
)
from loadtest.results.model.sets import (
    CurvePoint,
    GateResult,
    MaxRate,
    Regression,
    RegressionCheck,
    RepeatDoc,
    RepeatStat,
    Replicates,
    SweepDoc,
    SweepPoint,
)

__all__ = [
    "ApiResult",
    "BackendFacts",
    "HEADLINE",
    "REPEAT_SCHEMA",
    "RUN_SCHEMA",
    "SWEEP_SCHEMA",
    "Check",
    "CurvePoint",
    "GateResult",
    "GoodputResult",
    "Harness",
    "IntervalPoint",
    "Knee",
    "LatencySummary",
    "MaxRate",
    "MediaSent",
    "Regression",
    "RegressionCheck",
    "RepeatDoc",
    "RepeatStat",
    "Replicates",
    "Requests",
    "ResultReadError",
    "RunMetrics",
    "RunStatus",
    "SessionsResult",
    "Stability",
    "StepResult",
    "StepsResult",
    "StructuredChecks",
    "SweepDoc",
    "SweepPoint",
    "SweepStatus",
    "Throughput",
    "Timeseries",
    "ToolCallChecks",
    "Trend",
    "TurnStats",
    "Validity",
    "Verdict",
    "VerdictName",
    "Window",
    "WorkerClock",
    "WorkerStats",
    "read_repeat",
    "read_run",
    "read_sweep",
]
