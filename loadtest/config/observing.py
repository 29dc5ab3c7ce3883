"""What a scenario has a run write and watch besides its latencies: outputs (the run
directory, per-request files, live metrics, spans), telemetry (the GPUs, the server's metrics)
and a profiler window."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from loadtest.config.types import Duration, PositiveDuration, StrictModel, as_written

_Model = StrictModel


class Outputs(_Model):
    """Where and what a run writes besides metrics.json."""

    dir: str | None = Field(
        None, description="Run directory (default reports/<name>-<UTC time>); --out overrides."
    )
    requests_jsonl: bool = Field(
        False,
        description="Also write every request: requests.jsonl (its times, derived latencies, "
        "tokens streamed and reported, status, the server's response id, token stamps) and "
        "requests.csv (the same without the stamps).",
    )
    interval: PositiveDuration = Field(
        as_written("1s"),
        description="Time-series bucket width (10ms at least: each bucket holds histograms).",
    )
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Serve live Prometheus metrics on this port while the run, sweep or "
        "repeat runs (0: any free port, printed); --metrics-port overrides. Needs the "
        "prometheus extra.",
    )
    otel: bool = Field(
        False,
        description="Export each request as an OpenTelemetry span (OTLP; where to, from the "
        "standard OTEL_EXPORTER_OTLP_* variables) and send its W3C traceparent, so a server's "
        "own span joins its trace; --otel. Needs the otel extra.",
    )
    metrics_address: str = Field(
        "127.0.0.1",
        description="The address the metrics endpoint listens on: loopback by default; "
        "0.0.0.0 (every interface) or one address for a Prometheus on another host.",
    )
    metrics_linger: Duration = Field(
        as_written("15s"),
        description="After the last point, how long the endpoint waits to be scraped once more "
        "(it stops at that scrape), so the final figures are seen.",
    )

    @field_validator("interval")
    @classmethod
    def _interval_holds_requests(cls, v: int) -> int:
        if v < 10_000_000:
            raise ValueError(
                f"{v} ns is too short: 10ms at least (each interval keeps its own histograms)"
            )
        return v


class Telemetry(_Model):
    """GPU sampling during the run."""

    gpu: bool | Literal["auto"] = Field(
        "auto",
        description="Sample every visible NVIDIA GPU of this host through NVML (none, or no "
        "NVML: the result says why and the run goes on). auto: yes, unless the system under "
        "test is a server on another host (its GPUs are not these); true: always; false: never.",
    )
    interval: PositiveDuration = Field(as_written("250ms"), description="GPU sampling period.")
    server: bool | Literal["auto"] = Field(
        "auto",
        description="Sample the server's Prometheus /metrics (vLLM, SGLang, TGI names mapped to "
        "common ones) into server.csv and metrics.server. auto: for openai backends.",
    )
    server_interval: PositiveDuration = Field(
        as_written("1s"), description="How often the server's /metrics is read."
    )
    devices: list[int] | None = Field(
        None, description="NVML device indices to sample (default: all)."
    )
    dcgm: str | None = Field(
        None,
        description="A DCGM exporter's /metrics URL (e.g. http://gpu-host:9400/metrics): the "
        "served model's GPUs are sampled from it every server_interval, in place of this "
        "host's NVML, with the same columns, summary and joules per token.",
    )

    @field_validator("dcgm")
    @classmethod
    def _dcgm_url(cls, v: str | None) -> str | None:
        from urllib.parse import urlsplit

        if v is not None and (
            urlsplit(v).scheme not in ("http", "https") or not urlsplit(v).hostname
        ):
            raise ValueError(
                f"{v!r}: give the exporter's http:// URL, such as http://host:9400/metrics"
            )
        return v


class Profile(_Model):
    """A profiler capture window, in steady state: by time from t0, or by request indices."""

    start: Duration | None = Field(None, description="Window start, from t0 (e.g. 30s).")
    duration: Duration | None = Field(None, description="Window length (e.g. 5s).")
    requests: tuple[int, int] | None = Field(
        None, description="[first, last]: from the first's send to the last's end."
    )
    record_shapes: bool = Field(False, description="Record operator input shapes (a larger trace).")
    profile_memory: bool = Field(False, description="Track tensor memory allocations.")
    with_stack: bool = Field(False, description="Record Python stacks (large traces).")
    tensorboard: bool = Field(False, description="Also write a TensorBoard profile folder (tb/).")
    top_ops: int = Field(
        20, ge=1, description="Operators listed in the result, by self device time."
    )
    exclude_from_stats: bool = Field(
        True,
        description="Keep requests that overlap the window out of the latency "
        "histograms and SLA (profiling perturbs them); they are flagged either way.",
    )
    call_timeout: PositiveDuration = Field(
        as_written("60s"),
        description="The longest a profiler's start or stop may take (a server writes its "
        "traces before its stop answers); past it the window closes, saying so, and the run "
        "goes on.",
    )

    @model_validator(mode="after")
    def _one_kind(self):
        by_time = self.start is not None or self.duration is not None
        if by_time == (self.requests is not None):
            raise ValueError("give start and duration, or requests: [first, last]")
        if by_time and (self.start is None or self.duration is None or self.duration <= 0):
            raise ValueError("a time window needs both start and a positive duration")
        if self.requests is not None and not 0 <= self.requests[0] <= self.requests[1]:
            raise ValueError("requests: [first, last] with 0 <= first <= last")
        return self
