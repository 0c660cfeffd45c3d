"""Hardware sampling: host CPU via psutil, GPUs via NVML (pynvml, from nvidia-ml-py).

Without a GPU or NVML the GPU series are simply never created: absent, not zero. Errors from one GPU
query (unsupported field on a given board) leave that series out rather than failing the sampler.
"""

from __future__ import annotations

import logging
from typing import Any

import psutil
import pynvml

from verl.metrics.registry import MetricsRegistry

log = logging.getLogger(__name__)



class HardwareSampler:
    def __init__(self, metrics: MetricsRegistry) -> None:
        self.metrics = metrics
        self.handles: list[Any] = []
        self._nvlink_seen: dict[tuple[str, str, str], int] = {}
        self.gpu_model = "cpu"
        psutil.cpu_percent(interval=None)  # first call primes the counter
        try:
            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            if self.handles:
                name = pynvml.nvmlDeviceGetName(self.handles[0])
                self.gpu_model = name.decode() if isinstance(name, bytes) else str(name)
        except pynvml.NVMLError:
            self.handles = []
        self._xid_events = self._register_xid_events()

    def _register_xid_events(self) -> Any:
        if not self.handles:
            return None
        try:
            events = pynvml.nvmlEventSetCreate()
            for handle in self.handles:
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, events)
            return events
        except pynvml.NVMLError:
            return None  # not supported here (e.g. inside some containers): no Xid counting

    def sample(self) -> None:
        self.metrics["verl_host_cpu_utilization_ratio"].set(psutil.cpu_percent(interval=None) / 100.0)
        for index, handle in enumerate(self.handles):
            self._sample_gpu(str(index), handle)
        self._drain_xid_events()

    def _drain_xid_events(self) -> None:
        while self._xid_events is not None:
            try:
                event = pynvml.nvmlEventSetWait(self._xid_events, 0)
            except pynvml.NVMLError:
                return  # timeout: no pending event
            gpu = next((str(i) for i, h in enumerate(self.handles) if h == event.device), "unknown")
            self.record_xid(gpu, int(event.eventData))

    def _sample_gpu(self, gpu: str, handle: Any) -> None:
        m = self.metrics
        queries = {
            "memory": lambda: pynvml.nvmlDeviceGetMemoryInfo(handle),
            "util": lambda: pynvml.nvmlDeviceGetUtilizationRates(handle),
            "temp": lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            # NVML reports PCIe throughput in KB/s.
            "tx": lambda: pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES) * 1024,
            "rx": lambda: pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES) * 1024,
        }
        values = {}
        for key, query in queries.items():
            try:
                values[key] = query()
            except pynvml.NVMLError:
                continue
        if "memory" in values:
            m["verl_gpu_memory_used_bytes"].labels(gpu=gpu).set(values["memory"].used)
            m["verl_gpu_memory_total_bytes"].labels(gpu=gpu).set(values["memory"].total)
        if "util" in values:
            m["verl_gpu_utilization_ratio"].labels(gpu=gpu).set(values["util"].gpu / 100.0)
        if "temp" in values:
            m["verl_gpu_temperature_celsius"].labels(gpu=gpu).set(values["temp"])
        if "tx" in values:
            m["verl_gpu_pcie_tx_bytes_per_second"].labels(gpu=gpu).set(values["tx"])
        if "rx" in values:
            m["verl_gpu_pcie_rx_bytes_per_second"].labels(gpu=gpu).set(values["rx"])
        self._sample_nvlink(gpu, handle)

    def _sample_nvlink(self, gpu: str, handle: Any) -> None:
        """NVML exposes cumulative NVLink error counters; the exported counter advances by their delta."""
        kinds = {"crc_flit": "NVML_NVLINK_ERROR_DL_CRC_FLIT", "crc_data": "NVML_NVLINK_ERROR_DL_CRC_DATA",
                 "replay": "NVML_NVLINK_ERROR_DL_REPLAY", "recovery": "NVML_NVLINK_ERROR_DL_RECOVERY"}
        for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 0)):
            try:
                if not pynvml.nvmlDeviceGetNvLinkState(handle, link):
                    continue
            except pynvml.NVMLError:
                return  # no NVLink on this board
            for kind, const in kinds.items():
                try:
                    total = pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, getattr(pynvml, const))
                except (pynvml.NVMLError, AttributeError):
                    continue
                key = (gpu, str(link), kind)
                counter = self.metrics["verl_gpu_nvlink_errors_total"].labels(gpu=gpu, link=str(link), type=kind)
                counter.inc(max(0, total - self._nvlink_seen.get(key, total)))
                self._nvlink_seen[key] = total

    def record_xid(self, gpu: str, xid: int) -> None:
        """Xid events arrive through NVML's event set (or dmesg); callers report them here."""
        self.metrics["verl_gpu_xid_errors_total"].labels(gpu=gpu, xid=str(xid)).inc()
