"""Hardware sampler: GPU series come from NVML when it answers, and are absent (not zero) when it does not.
NVML is replaced by a small fake module here; the real one needs a GPU."""

from __future__ import annotations

import types

import pytest
from prometheus_client import generate_latest

from verl.metrics import hardware
from verl.metrics.registry import MetricsRegistry


class NVMLError(Exception):
    pass


def _fake_nvml(gpus: int, nvlink_errors: list[int], xids: list[int]) -> types.SimpleNamespace:
    handles = [f"h{i}" for i in range(gpus)]
    pending = list(xids)

    def event_wait(_set: object, _timeout: int) -> types.SimpleNamespace:
        if not pending:
            raise NVMLError("timeout")
        return types.SimpleNamespace(device="h1", eventData=pending.pop(0))

    return types.SimpleNamespace(
        NVMLError=NVMLError, NVML_TEMPERATURE_GPU=0, NVML_PCIE_UTIL_TX_BYTES=0, NVML_PCIE_UTIL_RX_BYTES=1,
        NVML_NVLINK_MAX_LINKS=2, NVML_NVLINK_ERROR_DL_CRC_FLIT=0, NVML_NVLINK_ERROR_DL_CRC_DATA=1,
        NVML_NVLINK_ERROR_DL_REPLAY=2, NVML_NVLINK_ERROR_DL_RECOVERY=3, nvmlEventTypeXidCriticalError=8,
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: gpus, nvmlDeviceGetHandleByIndex=lambda i: handles[i],
        nvmlDeviceGetName=lambda h: b"NVIDIA H200",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=1000, total=4000),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=75),
        nvmlDeviceGetTemperature=lambda h, kind: 61,
        nvmlDeviceGetPcieThroughput=lambda h, kind: 10 if kind == 0 else 20,
        nvmlDeviceGetNvLinkState=lambda h, link: 1 if link == 0 else 0,
        nvmlDeviceGetNvLinkErrorCounter=lambda h, link, kind: nvlink_errors[0] if kind == 2 else 0,
        nvmlEventSetCreate=lambda: object(), nvmlDeviceRegisterEvents=lambda h, kind, s: None,
        nvmlEventSetWait=event_wait,
    )


def _scrape(registry: MetricsRegistry) -> str:
    return generate_latest(registry.registry).decode()


def test_gpu_series_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    errors = [5]
    monkeypatch.setattr(hardware, "pynvml", _fake_nvml(2, errors, xids=[79]))
    registry = MetricsRegistry()
    sampler = hardware.HardwareSampler(registry)
    assert sampler.gpu_model == "NVIDIA H200"
    sampler.sample()
    errors[0] = 8
    sampler.sample()
    text = _scrape(registry)
    assert 'verl_gpu_memory_used_bytes{gpu="1"} 1000.0' in text
    assert 'verl_gpu_memory_total_bytes{gpu="0"} 4000.0' in text
    assert 'verl_gpu_utilization_ratio{gpu="0"} 0.75' in text
    assert 'verl_gpu_temperature_celsius{gpu="0"} 61.0' in text
    assert 'verl_gpu_pcie_tx_bytes_per_second{gpu="0"} 10240.0' in text
    # the exported counter advances by NVML's delta, not its absolute value at start
    assert 'verl_gpu_nvlink_errors_total{gpu="0",link="0",type="replay"} 3.0' in text
    assert 'link="1"' not in text
    assert 'verl_gpu_xid_errors_total{gpu="1",xid="79"} 1.0' in text


def test_no_nvml_means_no_gpu_series(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_nvml(0, [0], [])

    def broken_init() -> None:
        raise NVMLError("driver not loaded")

    fake.nvmlInit = broken_init
    monkeypatch.setattr(hardware, "pynvml", fake)
    registry = MetricsRegistry()
    sampler = hardware.HardwareSampler(registry)
    sampler.sample()
    text = _scrape(registry)
    assert sampler.gpu_model == "cpu"
    assert "verl_gpu_memory_used_bytes{" not in text and "verl_gpu_utilization_ratio{" not in text
    assert "verl_host_cpu_utilization_ratio " in text
