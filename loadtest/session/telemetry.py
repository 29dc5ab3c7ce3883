"""The samplers a point runs beside its requests: this host's GPUs (unless they are not the
system under test's) and a served model's own ``/metrics``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtest.config.backend_specs import OpenAISpec
from loadtest.config.scenario import Scenario
from loadtest.telemetry.gpu_section import GpuSource
from loadtest.telemetry.server_section import ServerSource


def gpu_off_reason(scenario: Scenario) -> str | None:
    """Why this host's GPUs are not sampled, or None when they are."""
    gpu = scenario.telemetry.gpu
    if gpu is False:
        return "telemetry.gpu: false"
    if scenario.telemetry.dcgm is not None:
        return None
    served_at = scenario.backend.served_at()
    if gpu == "auto" and served_at is not None and not served_at.startswith("unix:"):
        # (a Unix socket's server is on this host)
        from urllib.parse import urlsplit

        host = (urlsplit(served_at).hostname or "").lower()
        if host not in ("localhost", "127.0.0.1", "::1", "0.0.0.0") and host not in _own_names():
            return (
                f"the server ({host}) is not on this host: its GPUs are not these "
                "(telemetry.gpu: true samples this host's anyway)"
            )
    return None


def _own_names() -> set[str]:
    import socket

    names = {socket.gethostname().lower(), socket.getfqdn().lower()}
    return names


def server_sampler(scenario: Scenario, base_dir: Path) -> ServerSource | None:
    """A started sampler of the server's /metrics, or None (not a served model, or off)."""
    served_at = scenario.backend.served_at()
    if scenario.telemetry.server is False or served_at is None:
        return None
    from loadtest.backends.openai.connection import client_settings as settings_of
    from loadtest.backends.openai.discovery import without_credentials
    from loadtest.telemetry.server_metrics import EndpointSamplers, ServerSampler, metrics_url

    spec = scenario.backend
    given = spec.base_urls() if isinstance(spec, OpenAISpec) else [served_at]
    samplers = {
        without_credentials(url): ServerSampler(
            metrics_url(without_credentials(url)),
            scenario.telemetry.server_interval / 1e9,
            settings=settings_of(spec, base_dir, url) if isinstance(spec, OpenAISpec) else None,
        )
        for url in given
    }
    sampler: ServerSource = (
        EndpointSamplers(samplers) if len(samplers) > 1 else next(iter(samplers.values()))
    )
    sampler.start()
    return sampler


def client_settings(scenario: Scenario, base_dir: Path) -> Any:
    """The served model's one client configuration, for the calls beside the requests (its
    headers go to its own origin only); None for an engine."""
    if not isinstance(scenario.backend, OpenAISpec):
        return None
    from loadtest.backends.openai.connection import client_settings as settings_of

    return settings_of(scenario.backend, base_dir)


def gpu_sampler(scenario: Scenario, base_dir: Path) -> GpuSource | None:
    """A started GPU sampler, or None when the scenario turns sampling off."""
    if gpu_off_reason(scenario) is not None:
        return None
    if scenario.telemetry.dcgm is not None:  # the server's GPUs, from its DCGM exporter
        from loadtest.telemetry.dcgm import DcgmSampler

        dcgm = DcgmSampler(
            scenario.telemetry.dcgm,
            scenario.telemetry.server_interval / 1e9,
            settings=client_settings(scenario, base_dir),
        )
        dcgm.start()
        return dcgm
    from loadtest.telemetry.gpu_sampler import GpuSampler

    sampler = GpuSampler(scenario.telemetry.interval / 1e9, devices=scenario.telemetry.devices)
    sampler.start()
    return sampler


def gpu_scope(scenario: Scenario) -> str:
    """Whose GPUs the sampled ones are: a served model's may be elsewhere, never labelled as its."""
    if scenario.telemetry.dcgm is not None:
        return f"the server's, from its DCGM exporter ({scenario.telemetry.dcgm})"
    if scenario.backend.served_at() is not None:
        return "this host (the load generator's); the server's own GPUs are not sampled"
    return "this host (the engine's)"
