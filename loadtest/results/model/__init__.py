"""The typed result documents: ``metrics.json``, ``repeat.json``, ``sweep.json`` and a gate's verdict.

Every document is written with ``model_dump_json`` and read back with ``model_validate_json``
(``read_run``), so a file that does not fit is refused with the field that does not, never
half-read. ``schema`` names the document and its major version; a file of another version gets
a clear message instead of a misreading. Sections that describe the outside world in its own
terms (the scenario, the environment, the backend's own facts) stay open mappings; everything
loadtest computes or measures is typed, the telemetry sections (``gpu``, ``server``,
``profile``, ``roofline``) by the samplers that make them (``loadtest.telemetry.*_section``),
written as given: a figure that was not measured is left out.

``base`` holds what they share, ``run`` one run's document (its traffic's parts in
``traffic``, its verdicts in ``judged``, the backend's own facts in ``backend_facts``),
``sets`` the documents about several runs, ``reading`` the readers; this package is their one
import.
"""

from loadtest.results.model.backend_facts import (
    BackendFacts,
    MediaSent,
    OutputChecks,
    ReplicaFacts,
    StructuredChecks,
    TensorParallelFacts,
    ToolCallChecks,
)
from loadtest.results.model.base import (
    HEADLINE,
    REPEAT_SCHEMA,
    RUN_SCHEMA,
    SWEEP_SCHEMA,
    LatencySummary,
    RunStatus,
    SweepStatus,
    VerdictName,
)
from loadtest.results.model.judged import Check, Stability, Trend, Verdict
from loadtest.results.model.reading import ResultReadError, read_repeat, read_run, read_sweep
from loadtest.results.model.run import (
    AnswersResult,
    AnswerTally,
    ApiResult,
    Cost,
    GoodputResult,
    Harness,
    IntervalPoint,
    Requests,
    RunMetrics,
    SessionsResult,
    Throughput,
    Timeseries,
    TurnStats,
    Validity,
    Window,
    WorkerClock,
    WorkerStats,
)
from loadtest.results.model.sets import (
    Cheapest,
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
from loadtest.results.model.traffic import (
    CancelResult,
    Knee,
    ModelResult,
    StepResult,
    StepsResult,
    TraceResult,
    TrafficResult,
)
from loadtest.telemetry.gpu_section import Dist, GpuDevice, GpuSection, GpuSeries, SamplerCost
from loadtest.telemetry.profile_section import (
    Kernel,
    KernelSummary,
    Operator,
    Perturbation,
    ProfileSection,
    Span,
)
from loadtest.telemetry.roofline_section import (
    DecodeRoof,
    Diagnosis,
    ModelCosts,
    Peaks,
    PrefillRoof,
    RooflineSection,
)
from loadtest.telemetry.server_section import (
    ServerMetric,
    ServerMetrics,
    ServerSection,
    TtftCompared,
)

__all__ = [
    "AnswersResult",
    "AnswerTally",
    "ApiResult",
    "BackendFacts",
    "HEADLINE",
    "REPEAT_SCHEMA",
    "RUN_SCHEMA",
    "SWEEP_SCHEMA",
    "Check",
    "ServerMetric",
    "ServerMetrics",
    "ServerSection",
    "TtftCompared",
    "Kernel",
    "KernelSummary",
    "Operator",
    "Perturbation",
    "ProfileSection",
    "Span",
    "DecodeRoof",
    "Diagnosis",
    "ModelCosts",
    "Peaks",
    "PrefillRoof",
    "RooflineSection",
    "Dist",
    "GpuDevice",
    "GpuSection",
    "GpuSeries",
    "SamplerCost",
    "Cheapest",
    "CurvePoint",
    "GateResult",
    "Cost",
    "GoodputResult",
    "Harness",
    "IntervalPoint",
    "Knee",
    "LatencySummary",
    "MaxRate",
    "MediaSent",
    "OutputChecks",
    "Regression",
    "RegressionCheck",
    "RepeatDoc",
    "RepeatStat",
    "Replicates",
    "ReplicaFacts",
    "Requests",
    "TensorParallelFacts",
    "ResultReadError",
    "RunMetrics",
    "RunStatus",
    "SessionsResult",
    "Stability",
    "StepResult",
    "StepsResult",
    "TraceResult",
    "TrafficResult",
    "CancelResult",
    "ModelResult",
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
