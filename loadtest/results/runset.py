"""A saved run, or a set of replicated runs (``run --repeat``), read back from disk.

A run directory holds ``metrics.json``; a repeat directory holds ``repeat.json`` naming its
replicate run directories. ``gate`` and ``compare`` take either. The pooled view merges the
replicates' histograms (hdrh merges losslessly) and counts, so SLA checks on a repeat set use all
of its samples as evidence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from loadtest.core.histogram import LatencyHistogram

REPEAT_FILE = "repeat.json"
_STATUS_ORDER = ("failed", "interrupted", "invalid", "ok")  # the pooled status is the worst


class RunSetError(Exception):
    pass


@dataclass
class RunSet:
    path: Path
    runs: list[dict]  # each replicate's metrics.json
    repeat: dict | None = None  # repeat.json, for a repeat directory

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def measured(self) -> list[dict]:
        """The replicates that measured something (a run that failed to start has no histograms)."""
        return [m for m in self.runs if "histograms" in m]

    def pooled(self) -> dict:
        """A metrics-like dict over all replicates, enough for ``sla.evaluate``."""
        if len(self.runs) == 1:
            return self.runs[0]
        measured = self.measured
        status = min((m["status"] for m in self.runs), key=_STATUS_ORDER.index)
        reasons = [
            f"{label(m, i)}: {r}"
            for i, m in enumerate(self.runs)
            for r in m.get("validity", {}).get("reasons", [])
        ]
        pooled = {
            "status": status,
            "name": self.name,
            "validity": {"valid": not reasons, "reasons": reasons, "warnings": []},
        }
        if not measured:
            return pooled
        hists: dict[str, LatencyHistogram] = {}
        for m in measured:
            for name, text in m["histograms"].items():
                h = LatencyHistogram.decode(text, m["histograms_over_range"].get(name, 0))
                hists.setdefault(name, LatencyHistogram()).add(h)
        requests = {k: sum(m["requests"][k] for m in measured) for k in ("completed", "failed")}
        window = sum(m["throughput"]["window_s"] or 0 for m in measured)
        tokens = sum(m["throughput"]["output_tokens_in_window"] for m in measured)
        done = sum(
            (m["throughput"]["requests_per_s"] or 0) * (m["throughput"]["window_s"] or 0)
            for m in measured
        )
        pooled.update(
            {
                "histograms": {k: h.encode() for k, h in hists.items()},
                "histograms_over_range": {k: h.over_range for k, h in hists.items()},
                "requests": requests,
                "throughput": {
                    "output_tokens_per_s": tokens / window if window else None,
                    "requests_per_s": done / window if window else None,
                    "window_s": window or None,
                },
            }
        )
        return pooled


def label(metrics: dict, i: int) -> str:
    return metrics.get("_dir") or f"run {i + 1}"


def load(path: str | Path) -> RunSet:
    path = Path(path)
    repeat_file, _metrics_file = path / REPEAT_FILE, path / "metrics.json"
    try:
        if repeat_file.exists():
            repeat = json.loads(repeat_file.read_text())
            runs = [_read(path / d) for d in repeat["runs"]]
            return RunSet(path, runs, repeat)
        return RunSet(path, [_read(path)])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunSetError(f"{path}: {exc}") from None


def _read(run_dir: Path) -> dict:
    if not (run_dir / "metrics.json").exists():
        raise RunSetError(
            f"{run_dir}: no metrics.json (not a run directory, nor a repeat directory with {REPEAT_FILE})"
        )
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    problem = _shape_problem(metrics)
    if problem:
        raise RunSetError(f"{run_dir / 'metrics.json'}: not a loadtest result: {problem}")
    metrics["_dir"] = run_dir.name
    return metrics


_STATUSES = ("ok", "invalid", "interrupted", "failed")


def _shape_problem(metrics: object) -> str | None:
    """What makes a metrics.json unusable for a verdict (a usage error, not INCONCLUSIVE)."""
    if not isinstance(metrics, dict):
        return "expected a JSON object"
    if metrics.get("status") not in _STATUSES:
        return f"status: expected one of {', '.join(_STATUSES)}"
    if "histograms" not in metrics:
        return None  # a run that failed to start: nothing measured, and it says so
    for key in ("histograms", "histograms_over_range", "requests", "throughput", "latency_ms"):
        if not isinstance(metrics.get(key), dict):
            return f"{key}: missing or not an object"
    for name, text in metrics["histograms"].items():
        try:
            LatencyHistogram.decode(text)
        except Exception:  # hdrh raises several types for a corrupt encoding
            return f"histograms.{name}: not an encoded HDR histogram"
    return None
