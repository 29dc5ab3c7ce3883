"""``run --repeat N``: one scenario N times with different schedule seeds, the model loaded once.

The profiling playbooks' discipline: at least three runs, report the median and the spread. The
replicates are also the evidence the regression gate resamples first (run-to-run variation).
Replicate i uses schedule seed ``seeds.schedule + i``; prompts and lengths keep their seeds, so
the replicates differ only in when requests arrive. ``repeat.json`` names the replicate run
directories and holds the median and spread of each headline metric, and the SLA verdict on the
pooled histograms (every replicate's samples count as evidence).
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from loadtest.analysis.sla import evaluate
from loadtest.config.loading import LoadedScenario
from loadtest.core import atomic
from loadtest.results.model import HEADLINE, RepeatDoc, RepeatStat, RunMetrics
from loadtest.results.runset import REPEAT_FILE, RunSet
from loadtest.session import Session


def summarize(runs: list[RunMetrics]) -> dict[str, RepeatStat]:
    """Per headline metric: the median, min, max and spread ((max - min) / median) over replicates."""
    out = {}
    for name in HEADLINE:
        values = [v for v in (m.headline(name) for m in runs) if v is not None]
        if not values:
            out[name] = RepeatStat(n=0)
            continue
        med = statistics.median(values)
        out[name] = RepeatStat(
            n=len(values),
            median=med,
            min=min(values),
            max=max(values),
            spread_pct=100.0 * (max(values) - min(values)) / med if med else None,
            values=values,
        )
    return out


def replicate(loaded: LoadedScenario, i: int) -> LoadedScenario:
    """The scenario for replicate ``i``: schedule seed + i, everything else unchanged."""
    sc = loaded.scenario
    seeds = sc.seeds.model_copy(update={"schedule": sc.seeds.schedule + i})
    return dataclasses.replace(loaded, scenario=sc.model_copy(update={"seeds": seeds}))


async def run_repeats(loaded: LoadedScenario, out: Path, n: int, session: Session) -> RepeatDoc:
    """Run ``n`` replicates on one session into ``out/rep-*``; repeat.json after each one."""
    runs: list[RunMetrics] = []
    dirs: list[str] = []
    for i in range(n):
        run_dir = out / f"rep-{i + 1}"
        result = await session.run_point(
            replicate(loaded, i), run_dir, metrics_as=(out.name, run_dir.name)
        )
        runs.append(result.result)
        dirs.append(run_dir.name)
        doc = _doc(loaded, out, runs, dirs, n)
        atomic.write_json(
            out / REPEAT_FILE, doc.view()
        )  # after every replicate: partial results survive
        if result.status in ("interrupted", "failed"):
            break
    return doc


def _doc(
    loaded: LoadedScenario, out: Path, runs: list[RunMetrics], dirs: list[str], n: int
) -> RepeatDoc:
    pooled = RunSet(out, runs, dirs).pooled()
    sla = loaded.scenario.sla
    status = pooled.status if len(runs) == n or pooled.status != "ok" else "interrupted"
    return RepeatDoc(
        name=loaded.scenario.name,
        scenario_file=str(loaded.path),
        status=status,
        repeats=n,
        runs=dirs,
        schedule_seeds=[loaded.scenario.seeds.schedule + i for i in range(len(runs))],
        summary=summarize([m for m in runs if m.measured]),
        reasons=pooled.reasons,
        sla=evaluate(sla, pooled) if sla and pooled.histograms is not None else None,
    )
