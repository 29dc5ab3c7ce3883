"""A staircase's steps judged one by one, from one run: each step's requests (by intended send
time), their TTFT and E2E percentiles, and the stability verdict on the step's own span; and the
knee, the first step the system did not carry."""

from __future__ import annotations

from loadtest.core.histogram import LatencyHistogram
from loadtest.execution.timeline import Timeline
from loadtest.results.model import Knee, LatencySummary, StepResult, StepsResult
from loadtest.results.stability import judge


def judge_steps(
    steps: list[tuple[float, int]], tl: Timeline, t0_ns: int, interval_ns: int
) -> StepsResult:
    """``steps``: (rate, length ns) in order, from t0."""
    out: list[StepResult] = []
    start = t0_ns
    for index, (rate, length) in enumerate(steps, 1):
        end = start + length
        ttft, e2e = LatencyHistogram(), LatencyHistogram()
        requests = 0
        for intended, first, done, measured in zip(tl.intended, tl.first, tl.done, tl.measured):
            if measured and start <= intended < end:
                requests += 1
                e2e.record_ns(done - intended)
                if first >= 0:
                    ttft.record_ns(first - intended)
        stability = judge(tl, start, end, interval_ns, open_loop=True)
        out.append(
            StepResult(
                index=index,
                rate=rate,
                start_s=(start - t0_ns) / 1e9,
                end_s=(end - t0_ns) / 1e9,
                requests=requests,
                delivered_rps=None if stability is None else stability.delivered_rps,
                ttft_ms=LatencySummary(**ttft.summary_ms()),
                e2e_ms=LatencySummary(**e2e.summary_ms()),
                stability=stability,
            )
        )
        start = end
    return StepsResult(steps=out, knee=_knee(out))


def _knee(steps: list[StepResult]) -> Knee | None:
    """The first step judged not steady, after the last steady one before it."""
    last_steady: float | None = None
    for step in steps:
        st = step.stability
        if st is not None and not st.steady:
            return Knee(
                last_steady_rate=last_steady,
                first_unsteady_rate=step.rate,
                step=step.index,
                reasons=list(st.reasons),
            )
        if st is not None:
            last_steady = step.rate
    return None
