"""What the numbers were measured on: versions, commit, host, CPU, GPUs; and what makes a
measurement suspect. Reads only; imports nothing heavy (torch and transformers versions are
reported only when the backend already imported them). The GPU part comes from NVML, read once
at the start of a run: driver, CUDA, each device's name, UUID, memory, clocks, power limit,
persistence and ECC, and the processes already on it."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from loadtest.core import loop
from loadtest.core._version import __version__
from loadtest.core.json_types import JsonObject
from loadtest.telemetry.environment_section import Environment, GpuAtStart, GpuProcess
from loadtest.telemetry.gpu_sampler import Nvml
from loadtest.telemetry.gpu_section import GpuSection


def git_commit(path: Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout holding ``path``, or (None, None)."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        return commit.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


# Settings that make timings unrepresentative when left on.
DEBUG_ENV = (
    "CUDA_LAUNCH_BLOCKING",
    "TORCH_COMPILE_DEBUG",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "TORCH_USE_CUDA_DSA",
    "PYTHONASYNCIODEBUG",
    "TORCH_SHOW_CPP_STACKTRACES",
    "NVIDIA_TF32_OVERRIDE",
    "CUDA_DEVICE_MAX_CONNECTIONS",
)


def collect(
    seeds: JsonObject | None = None, scenario_sha256: str | None = None, gpus: bool = True
) -> Environment:
    """The environment manifest a run records: versions, commit, CPU, GPUs, seeds, scenario hash."""
    commit, dirty = git_commit(Path(__file__).resolve().parent)
    debug_flags: dict[str, str | bool] = {
        k: os.environ[k] for k in DEBUG_ENV if os.environ.get(k) not in (None, "", "0")
    }
    if sys.flags.dev_mode:
        debug_flags["python -X dev"] = True
    env = Environment(
        tool="loadtest",
        tool_version=__version__,
        commit=commit,
        dirty=dirty,
        python=platform.python_version(),
        implementation=platform.python_implementation(),
        platform=platform.platform(),
        machine=platform.machine(),
        hostname=socket.gethostname(),
        cpu_count=os.cpu_count(),
        seeds=seeds,
        scenario_sha256=scenario_sha256,
        container_image=os.getenv("LOADTEST_CONTAINER_IMAGE"),
        python_debug_build=hasattr(sys, "gettotalrefcount"),
        event_loop=loop.running(),
        cpu_model=_cpu_model(),
        cpu_governor=_read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        debug_flags=debug_flags,
    )
    versions: dict[str, str | None] = {}
    for name in ("torch", "transformers"):
        module = _imported(name)
        if module is not None:
            versions[name] = getattr(module, "__version__", None)
    torch = _imported("torch")
    if torch is not None:
        versions["torch_cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    env = env.model_copy(update=versions)
    for key in versions:  # set: written, a missing version as null
        env.model_fields_set.add(key)
    if gpus:
        env = gpu_manifest(env=env)
    return env


def _imported(name: str) -> ModuleType | None:
    """A module this process has finished importing, else None: another thread may be halfway
    through importing it (a backend loading its tokenizer when a start timeout fires), and a
    half-initialised module has no attributes yet."""
    module = sys.modules.get(name)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


def gpu_manifest(nvml: Nvml = None, env: Environment | None = None) -> Environment:
    """``env`` with ``gpu_driver``, ``cuda_driver`` and ``gpus`` from NVML, or ``gpus: []`` and
    the reason."""
    env = env or Environment()
    from loadtest.telemetry.gpu_sampler import load_nvml
    from loadtest.telemetry.gpu_sampler import nvml_text as _s
    from loadtest.telemetry.gpu_sampler import try_nvml as _try

    owned = nvml is None
    if owned:
        nvml, reason = load_nvml()
        if nvml is None:
            return _with(env, gpus=[], gpu_reason=reason)
    try:
        gpus: list[GpuAtStart] = []
        driver = _s(_try(nvml.nvmlSystemGetDriverVersion))
        cuda = _cuda_version(_try(nvml.nvmlSystemGetCudaDriverVersion))
        ours = _our_pids()
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = _try(nvml.nvmlDeviceGetMemoryInfo, h)
            ecc = _try(nvml.nvmlDeviceGetEccMode, h)
            procs = _try(nvml.nvmlDeviceGetComputeRunningProcesses, h) or []
            gpus.append(
                GpuAtStart(
                    index=i,
                    name=_s(_try(nvml.nvmlDeviceGetName, h)),
                    uuid=_s(_try(nvml.nvmlDeviceGetUUID, h)),
                    memory_total_mib=None if mem is None else round(mem.total / 2**20),
                    clocks_mhz={
                        k: _try(fn, h, clock)
                        for k, fn, clock in (
                            ("sm", nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM),
                            ("mem", nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM),
                            ("sm_max", nvml.nvmlDeviceGetMaxClockInfo, nvml.NVML_CLOCK_SM),
                            ("mem_max", nvml.nvmlDeviceGetMaxClockInfo, nvml.NVML_CLOCK_MEM),
                        )
                    },
                    power_limit_w=_div(_try(nvml.nvmlDeviceGetEnforcedPowerLimit, h), 1000),
                    persistence_mode=_try(nvml.nvmlDeviceGetPersistenceMode, h),
                    ecc=None if ecc is None else {"current": ecc[0], "pending": ecc[1]},
                    processes_at_start=[
                        GpuProcess(
                            pid=p.pid,
                            used_mib=_div(getattr(p, "usedGpuMemory", None), 2**20),
                            ours=p.pid in ours,
                        )
                        for p in procs
                    ],
                )
            )
        return _with(env, gpu_driver=driver, cuda_driver=cuda, gpus=gpus)
    except Exception as exc:
        return _with(env, gpus=[], gpu_reason=f"NVML: {exc}")
    finally:
        if owned:
            _try(nvml.nvmlShutdown)


def _with(env: Environment, **fields: object) -> Environment:
    """``env`` with these fields set (written, a None as null)."""
    out = env.model_copy(update=fields)
    out.model_fields_set.update(fields)
    return out


def warnings(env: Environment, gpu: GpuSection | None = None) -> list[str]:
    """What makes this measurement suspect: debug settings, foreign GPU processes, throttling,
    clocks far under their maximum while the GPU was busy, persistence mode off."""
    out = [
        f"debug setting on: {k}={v} (timings are not representative)"
        for k, v in (env.debug_flags or {}).items()
    ]
    if env.python_debug_build:
        out.append("a debug build of Python")
    for g in env.gpus or []:
        foreign = [p for p in g.processes_at_start if not p.ours]
        if foreign:
            out.append(
                f"GPU {g.index}: other processes at start: "
                + ", ".join(f"pid {p.pid} ({p.used_mib} MiB)" for p in foreign)
            )
        if g.persistence_mode == 0:
            out.append(
                f"GPU {g.index}: persistence mode off (the driver may re-initialise between runs)"
            )
    for d in (gpu.devices if gpu is not None else None) or []:
        if d.throttle_reasons_seen:
            out.append(
                f"GPU {d.index}: clocks throttled during the window: {', '.join(d.throttle_reasons_seen)}"
            )
        match = env.gpu_at(d.index)
        sm_max = ((match and match.clocks_mhz) or {}).get("sm_max")
        sm, util = d.clocks_sm_mhz, d.utilization_gpu_pct
        if sm_max and sm and util and util.mean > 30 and sm.mean < 0.7 * sm_max:
            out.append(
                f"GPU {d.index}: SM clock averaged {sm.mean:.0f} MHz while busy, under 70% of its "
                f"{sm_max} MHz maximum"
            )
    return out


def _our_pids() -> set[int]:
    """This process and its descendants (the engine worker): their GPU memory is ours."""
    me = os.getpid()
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parent[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    ours, changed = {me}, True
    while changed:
        changed = False
        for pid, ppid in parent.items():
            if ppid in ours and pid not in ours:
                ours.add(pid)
                changed = True
    return ours


def _cpu_model() -> str | None:
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _div(x: float | None, d: float) -> float | None:
    return None if x is None else round(x / d, 1)


def _cuda_version(v: int | None) -> str | None:
    return None if v is None else f"{v // 1000}.{(v % 1000) // 10}"
