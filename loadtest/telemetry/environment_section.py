"""The ``environment`` section of ``metrics.json``, typed: what the numbers were measured on
(versions, commit, host, CPU, the GPUs at start) and the settings that make timings suspect.
Open: a manifest from another version of loadtest reads with its other keys kept."""

from __future__ import annotations

from loadtest.core.document import OpenSection, Section
from loadtest.core.json_types import JsonObject


class GpuProcess(Section):
    """A process on a GPU when the run started; ``ours``: this process or its engine worker."""

    pid: int
    used_mib: float | None = None
    ours: bool = False


class GpuAtStart(Section):
    """One GPU as NVML described it at the start of the run (None: NVML could not say)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    memory_total_mib: int | None = None
    clocks_mhz: dict[str, int | None] | None = None  # sm, mem, sm_max, mem_max
    power_limit_w: float | None = None
    persistence_mode: int | None = None
    ecc: dict[str, int] | None = None  # current, pending
    processes_at_start: list[GpuProcess] = []


class Environment(OpenSection):
    """The environment manifest a run records."""

    tool: str | None = None
    tool_version: str | None = None
    commit: str | None = None
    dirty: bool | None = None
    python: str | None = None
    implementation: str | None = None
    platform: str | None = None
    machine: str | None = None
    hostname: str | None = None
    cpu_count: int | None = None
    seeds: JsonObject | None = None
    scenario_sha256: str | None = None
    container_image: str | None = None
    python_debug_build: bool | None = None
    event_loop: str | None = None
    cpu_model: str | None = None
    cpu_governor: str | None = None
    debug_flags: dict[str, str | bool] | None = None  # settings that make timings suspect
    torch: str | None = None
    transformers: str | None = None
    torch_cuda: str | None = None
    gpu_driver: str | None = None
    cuda_driver: str | None = None
    gpus: list[GpuAtStart] | None = None
    gpu_reason: str | None = None  # why no GPU is listed

    def gpu_named(self, name: str | None) -> GpuAtStart | None:
        """The first GPU of this name, where one is listed."""
        return next((g for g in self.gpus or [] if g.name == name), None)

    def gpu_at(self, index: int) -> GpuAtStart | None:
        return next((g for g in self.gpus or [] if g.index == index), None)
