"""torchrun --nproc-per-node 2 on CPU (gloo, DDP): parameters stay identical across ranks."""

from __future__ import annotations

import re
import sys

import pytest

from tests.verl.integration.exact_resume_chain import finish, start


@pytest.mark.slow
def test_two_ranks_keep_identical_parameters() -> None:
    # --standalone: torchrun picks a free loopback rendezvous port itself. metrics.prompt_analysis=lexical:
    # parameters are what this test compares, and once in a full suite (1 of ~6 today, none in 6 runs alone)
    # the two ranks never finished after loading the sentence-embedding model (tests/verl/test_semantic_data.py
    # covers that model); the output is now printed when a run times out
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "verl.cli.train", "--config", "ppo_tiny", "metrics.prompt_analysis=lexical",
           "trainer.total_steps=3", "data.batch_size=8", "actor.ppo_mini_batch_size=4", "critic.ppo_mini_batch_size=4"]
    proc = start(cmd)
    out = finish(proc)  # on a timeout: every rank killed, the output printed
    assert proc.returncode == 0, out[-3000:]
    final = dict(re.findall(r"rank=(\d) step=3 param_sha256=([0-9a-f]{64})", out))
    initial = dict(re.findall(r"rank=(\d) step=0 initial param_sha256=([0-9a-f]{64})", out))
    assert set(final) == {"0", "1"} and set(initial) == {"0", "1"}
    assert final["0"] == final["1"]
    assert final["0"] != initial["0"]   # updates really happened
