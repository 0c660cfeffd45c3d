"""Local NVML sampling (nvidia-ml-py) on the monitor's own host, when a GPU exists."""

from __future__ import annotations

import asyncio
import contextlib

from alerting.clock import Clock
from monitor.model import Sample, SourceBatch, with_node
from monitor.sources.base import DownLabels, Polled, Round


class NvmlSampler:
    def __init__(self, node: str | None = None) -> None:
        import pynvml

        self.nv = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self.node = node

    @staticmethod
    def available() -> bool:
        try:
            import pynvml

            pynvml.nvmlInit()
            n = pynvml.nvmlDeviceGetCount()
            pynvml.nvmlShutdown()
            return n > 0
        except Exception:
            return False

    def poll(self, now: float) -> SourceBatch:
        nv, batch = self.nv, SourceBatch("nvml")
        for i, h in enumerate(self.handles):
            labels = with_node({"gpu": str(i)}, self.node)
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                util = nv.nvmlDeviceGetUtilizationRates(h)
                temp = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
            except nv.NVMLError:
                batch.error("nvml_error")
                continue
            batch.samples += [
                Sample("verl_gpu_memory_used_bytes", labels, float(mem.used), now),
                Sample("verl_gpu_memory_total_bytes", labels, float(mem.total), now),
                Sample("verl_gpu_utilization_ratio", labels, util.gpu / 100.0, now),
                Sample("verl_gpu_temperature_celsius", labels, float(temp), now),
            ]
        return batch

    def close(self) -> None:
        self.nv.nvmlShutdown()


class NvmlSource:
    """The local GPUs every ``interval`` (NVML calls block: in a worker thread). A sampler that fails to
    open is a failed round, tried again the next."""

    def __init__(self, interval: float) -> None:
        self.name = self.metric = "nvml"
        self.interval, self.budget, self.offset, self.wait_after = interval, interval, 0.0, True
        self.down = DownLabels("nvml")
        self.sampler: NvmlSampler | None = None

    async def poll(self, clock: Clock) -> Round:
        if self.sampler is None:
            self.sampler = await asyncio.to_thread(NvmlSampler)
        return Round([Polled(await asyncio.to_thread(self.sampler.poll, clock.now()), source=self.metric)])

    async def close(self) -> None:
        if self.sampler is not None:
            with contextlib.suppress(Exception):
                self.sampler.close()
