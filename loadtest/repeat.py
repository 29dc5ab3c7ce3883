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
from loadtest.results.runset import REPEAT_FILE, RunSet
from loadtest.session import Session

SCHEMA = "loadtest/repeat/v1"

# name -> how to read it from a metrics.json
HEADLINE = {
    "output_tokens_per_s": ("throughput", "output_tokens_per_s"),
    "requests_per_s": ("throughput", "requests_per_s"),
    **{f"{m}_{p}": ("latency_ms", m, p) for m in ("ttft", "itl", "e2e") for p in ("p50", "p99")},
}


def headline(metrics: dict, name: str) -> float | None:
    value = metrics
    for key in HEADLINE[name]:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def summarize(runs: list[dict]) -> dict:
    """Per headline metric: the median, min, max and spread ((max - min) / median) over replicates."""
    out = {}
    for name in HEADLINE:
        values = [v for v in (headline(m, name) for m in runs) if v is not None]
        if not values:
            out[name] = {"n": 0}
            continue
        med = statistics.median(values)
        out[name] = {
            "n": len(values),
            "median": med,
            "min": min(values),
            "max": max(values),
            "spread_pct": 100.0 * (max(values) - min(values)) / med if med else None,
            "values": values,
        }
    return out


def replicate(loaded: LoadedScenario, i: int) -> LoadedScenario:
    sc = loaded.scenario
    seeds = sc.seeds.model_copy(update={"schedule": sc.seeds.schedule + i})
    return dataclasses.replace(loaded, scenario=sc.model_copy(update={"seeds": seeds}))


async def run_repeats(loaded: LoadedScenario, out: Path, n: int, session: Session) -> dict:
    runs, dirs = [], []
    for i in range(n):
        run_dir = out / f"rep-{i + 1}"
        result = await session.run_point(replicate(loaded, i), run_dir)
        runs.append({**result.metrics, "_dir": run_dir.name})  # _dir labels its reasons
        dirs.append(run_dir.name)
        doc = _doc(loaded, out, runs, dirs, n)
        atomic.write_json(out / REPEAT_FILE, doc)  # after every replicate: partial results survive
        if result.status in ("interrupted", "failed"):
            break
    return doc


def _doc(loaded: LoadedScenario, out: Path, runs: list[dict], dirs: list[str], n: int) -> dict:
    pooled = RunSet(out, runs).pooled()
    sla = loaded.scenario.sla
    status = pooled["status"] if len(runs) == n or pooled["status"] != "ok" else "interrupted"
    return {
        "schema": SCHEMA,
        "name": loaded.scenario.name,
        "scenario_file": str(loaded.path),
        "status": status,
        "repeats": n,
        "runs": dirs,
        "schedule_seeds": [loaded.scenario.seeds.schedule + i for i in range(len(runs))],
        "summary": summarize([m for m in runs if "latency_ms" in m]),
        "reasons": pooled.get("validity", {}).get("reasons", []),
        "sla": evaluate(runs[0]["scenario"]["sla"], pooled)
        if sla and "histograms" in pooled
        else None,
    }
