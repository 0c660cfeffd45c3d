"""The faults of the ``faults:`` section that belong to the trainer core. They act on the real code
paths: the dataloader stage really sleeps, kl_coef really becomes 0, memory is really allocated, the
process is really SIGKILLed. Reward, critic-OOM and worker faults are driven by the fault-tolerance
components.

GPU leak: the allocation is made on the actor's device. With a GPU, NVML sees it grow in
``verl_gpu_memory_used_bytes``; without one it is host memory (process RSS grows) and no GPU series is
invented — a simulated series must not pretend to be a GPU.
"""

from __future__ import annotations

import logging
import os
import signal

import torch

from verl.config.schema import FaultsConfig
from verl.utils.clock import Clock

log = logging.getLogger(__name__)
MiB = 1024 * 1024


class CoreFaults:
    def __init__(self, config: FaultsConfig, clock: Clock, device: torch.device) -> None:
        self.config = config
        self.clock = clock
        self.device = device
        self._leak: list[torch.Tensor] = []
        self._leak_bytes = 0
        self._started = clock.monotonic()

    def throughput_sleep(self, step: int, last_work_seconds: float) -> None:
        """Sleep so that step time becomes work / factor, i.e. tokens/s is multiplied by the factor."""
        at = self.config.throughput_drop_at_step
        if at is None or step < at or last_work_seconds <= 0:
            return
        self.clock.sleep(last_work_seconds * (1.0 / self.config.throughput_drop_factor - 1.0))

    def kl_coef(self, step: int, value: float) -> float:
        at = self.config.kl_drift_at_step
        return 0.0 if at is not None and step >= at else value

    def maybe_kill(self, step: int) -> None:
        if self.config.kill_trainer_at_step is not None and step == self.config.kill_trainer_at_step:
            log.warning("fault injection: SIGKILL trainer at step %d", step)
            os.kill(os.getpid(), signal.SIGKILL)

    def grow_leak(self) -> None:
        rate = self.config.gpu_leak_mb_per_min
        if rate <= 0:
            return
        minutes = (self.clock.monotonic() - self._started) / 60.0
        missing = int(rate * minutes * MiB) - self._leak_bytes
        if missing >= MiB:
            self._leak.append(torch.ones(missing, dtype=torch.uint8, device=self.device))
            self._leak_bytes += missing

    @property
    def leaked_bytes(self) -> int:
        return self._leak_bytes
