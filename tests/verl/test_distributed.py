"""torchrun --nproc-per-node 2 on CPU (gloo, DDP): parameters stay identical across ranks."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_ranks_keep_identical_parameters() -> None:
    # --standalone: torchrun picks a free loopback rendezvous port itself
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "verl.cli.train", "--config", "ppo_tiny",
           "trainer.total_steps=3", "data.batch_size=8", "actor.ppo_mini_batch_size=4", "critic.ppo_mini_batch_size=4"]
    # own session: on timeout the ranks die with torchrun instead of lingering in a gloo collective
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out[-3000:]
    final = dict(re.findall(r"rank=(\d) step=3 param_sha256=([0-9a-f]{64})", out))
    initial = dict(re.findall(r"rank=(\d) step=0 initial param_sha256=([0-9a-f]{64})", out))
    assert set(final) == {"0", "1"} and set(initial) == {"0", "1"}
    assert final["0"] == final["1"]
    assert final["0"] != initial["0"]   # updates really happened
