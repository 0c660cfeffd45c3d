"""The trainer-core faults act on real code paths: sleep, kl_coef, allocation, SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from verl.config.schema import FaultsConfig
from verl.trainer import RLTrainer
from verl.trainer.fault_injection import CoreFaults, MiB
from verl.utils.clock import SimulatedClock

ROOT = Path(__file__).resolve().parents[2]


def test_throughput_drop_sleeps_to_the_factor() -> None:
    clock = SimulatedClock()
    faults = CoreFaults(FaultsConfig(throughput_drop_at_step=5, throughput_drop_factor=0.5), clock, torch.device("cpu"))
    faults.throughput_sleep(step=4, last_work_seconds=2.0)
    assert clock.now() == 0.0
    faults.throughput_sleep(step=5, last_work_seconds=2.0)
    assert clock.now() == pytest.approx(2.0)   # step takes 4 s instead of 2: tokens/s halved


def test_leak_grows_a_real_allocation_with_time() -> None:
    clock = SimulatedClock()
    faults = CoreFaults(FaultsConfig(gpu_leak_mb_per_min=4.0), clock, torch.device("cpu"))
    faults.grow_leak()
    assert faults.leaked_bytes == 0
    clock.advance(90)
    faults.grow_leak()
    assert faults.leaked_bytes == 6 * MiB
    assert sum(t.numel() for t in faults._leak) == 6 * MiB


def test_kl_drift_sets_kl_coef_to_zero_in_the_loop() -> None:
    trainer = RLTrainer("ppo_tiny", overrides=["trainer.total_steps=3", "faults.kl_drift_at_step=2",
                                               "kl_coef=0.3", "trainer.torch_threads=0",
                                               "trainer.deterministic=false", "metrics.layer_kl=false"])
    try:
        coefs = [trainer.step().kl_coef for _ in range(3)]
    finally:
        trainer.close()
    assert coefs == [0.3, 0.0, 0.0]
    assert trainer.registry["verl_kl_coef"]._value.get() == 0.0


@pytest.mark.slow
def test_kill_trainer_at_step_is_a_real_sigkill() -> None:
    proc = subprocess.run([sys.executable, "-m", "verl.cli.train", "--config", "ppo_tiny",
                           "trainer.total_steps=5", "faults.kill_trainer_at_step=2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert "step 1/5" in proc.stdout and "step 2/5" not in proc.stdout


def test_fault_injection_stays_out_of_the_step_and_off_private_attributes() -> None:
    """The fault plan acts through StepHooks and public seams only: the step module names no fault, and
    nothing in the trainer package assigns another component's private attribute."""
    import re
    from pathlib import Path

    trainer_dir = Path(__file__).resolve().parents[2] / "verl" / "trainer"
    step_src = (trainer_dir / "ppo_step.py").read_text()
    assert "fault" not in step_src.lower(), "a fault is named in ppo_step.py"
    for path in trainer_dir.glob("*.py"):
        src = path.read_text()
        assert not re.search(r"\w+\._[a-z]\w*\s*=(?!=)", src.replace("self._", "")), f"private assignment in {path.name}"
        assert "getattr(pool" not in src
