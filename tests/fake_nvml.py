"""A stand-in for pynvml with scripted readings: for testing what the sampler does with missing
metrics and errors (no GPU here). The real NVML is exercised on the GPU machine."""

from __future__ import annotations

import types


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(
            {3: "Not Supported", 15: "GPU is lost", 999: "Unknown Error"}.get(value, str(value))
        )
        self.value = value


class FakeNVML:
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_TEMPERATURE_GPU = 0
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1

    NVML_GPM_METRICS_GET_VERSION = 1

    def __init__(
        self,
        *,
        devices: int = 1,
        unsupported=(),
        fail_calls: dict | None = None,
        power_w: float = 300.0,
        processes=(),
        gpm_values=None,
    ) -> None:
        self.devices = devices
        self.unsupported = set(unsupported)  # function names that raise NOT_SUPPORTED
        self.fail_calls = dict(fail_calls or {})  # name -> set of call numbers that raise an error
        self.calls: dict[str, int] = {}
        self.power_mw = int(power_w * 1000)
        self.energy_mj = 1_000_000
        self.processes = list(processes)
        self.shutdowns = 0
        # GPM (Hopper+): None = unsupported; else a function of the call number -> every metric's value
        self.gpm_values = gpm_values

    def _call(self, name: str):
        n = self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.unsupported:
            raise NVMLError(3)
        if n in self.fail_calls.get(name, ()):
            raise NVMLError(999)

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return self.devices

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-fake-{h}"

    def nvmlDeviceGetUtilizationRates(self, h):
        self._call("nvmlDeviceGetUtilizationRates")
        return types.SimpleNamespace(gpu=80, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        self._call("nvmlDeviceGetMemoryInfo")
        return types.SimpleNamespace(used=10 * 2**30, total=80 * 2**30, free=70 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h):
        self._call("nvmlDeviceGetPowerUsage")
        return self.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self._call("nvmlDeviceGetTotalEnergyConsumption")
        self.energy_mj += 75_000  # 75 J a call: 300 W at 250 ms
        return self.energy_mj

    def nvmlDeviceGetClockInfo(self, h, kind):
        self._call("nvmlDeviceGetClockInfo")
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, h, kind):
        self._call("nvmlDeviceGetTemperature")
        return 55

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self._call("nvmlDeviceGetCurrentClocksEventReasons")
        return 0x4  # sw power cap

    def nvmlDeviceGetPcieThroughput(self, h, kind):
        self._call("nvmlDeviceGetPcieThroughput")
        return 1000

    def nvmlGpmQueryDeviceSupport(self, h):
        self._call("nvmlGpmQueryDeviceSupport")
        return types.SimpleNamespace(isSupportedDevice=int(self.gpm_values is not None))

    def nvmlGpmSampleAlloc(self):
        return object()

    def nvmlGpmSampleFree(self, sample):
        pass

    def nvmlGpmSampleGet(self, h, sample):
        self._call("nvmlGpmSampleGet")

    class c_nvmlGpmMetricsGet_t:
        def __init__(self):
            self.metrics = [
                types.SimpleNamespace(metricId=0, value=0.0, nvmlReturn=0) for _ in range(98)
            ]

    def nvmlGpmMetricsGet(self, get):
        self._call("nvmlGpmMetricsGet")
        for m in get.metrics[: get.numMetrics]:
            m.value = self.gpm_values(self.calls["nvmlGpmMetricsGet"])

    def nvmlSystemGetDriverVersion(self):
        return "580.00"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetPersistenceMode(self, h):
        return 1

    def nvmlDeviceGetEccMode(self, h):
        return (1, 1)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [types.SimpleNamespace(pid=p, usedGpuMemory=512 * 2**20) for p in self.processes]


def run_with_nvml(tmp_path, data: dict, nvml):
    """A real-clock run of scenario ``data`` with ``nvml`` standing in for the GPU library (for
    the run only)."""
    import pytest

    from loadtest.config.loading import load_scenario
    from loadtest.session import run_scenario
    from loadtest.telemetry import gpu_sampler
    from tests.conftest import write_scenario

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gpu_sampler, "load_nvml", lambda: (nvml, None))
        return run_scenario(load_scenario(write_scenario(tmp_path, data)), tmp_path / "run")
