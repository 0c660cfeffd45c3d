"""faults.slow_rank: a straggler's sleep inside one stage's timer, on its rank only (issue 33.6). The torchrun
run whose slow rank the monitor pages is in tests/monitor/test_monitor_stragglers.py."""

from __future__ import annotations

import gc

import pytest

from verl.config.schema import FaultsConfig
from verl.trainer.fault_injection import slow_rank
from verl.trainer.stages import STEP_START, StageTimer, StepContext, StepHooks
from verl.utils.clock import SimulatedClock


def test_slow_rank_sleeps_inside_its_stage_on_its_rank_only() -> None:
    config = FaultsConfig(slow_rank=1, slow_rank_stage="reward", slow_rank_seconds=2.0, slow_rank_from_step=2)
    for rank, expected in ((0, [0.0, 0.0]), (1, [0.0, 2.0])):
        clock, hooks = SimulatedClock(0.0), StepHooks()
        slow_rank(hooks, config, clock, rank)
        got = []
        for step in (1, 2):
            timer = StageTimer(clock, enter=hooks.enter_stage)
            hooks.fire(STEP_START, StepContext(step=step))
            with timer("rollout"):
                pass
            with timer("reward"):
                pass
            assert timer.seconds["rollout"] == 0.0
            got.append(timer.seconds["reward"])
        assert got == expected, rank


def test_a_stage_s_time_blocked_in_collectives_is_kept_apart_from_its_compute() -> None:
    """A fast rank waits for its peer inside the stage's collective: that wait is not its work."""
    from verl.trainer.distributed import CollectiveWaits

    clock, waits = SimulatedClock(0.0), CollectiveWaits()
    timer = StageTimer(clock, waits=waits)
    with timer("reward"):
        clock.sleep(0.1)          # its own scoring
        waits.add(0.6)            # blocked in the gather while the slow peer scores
        clock.sleep(0.6)
    with timer("rollout"):
        clock.sleep(0.4)
    assert timer.seconds == pytest.approx({"reward": 0.7, "rollout": 0.4})
    assert timer.waiting == pytest.approx({"reward": 0.6, "rollout": 0.0})


def test_ddp_gradient_hook_times_the_wait_after_the_last_bucket() -> None:
    """The hook hands back the default all-reduce and adds the wait after this rank's last bucket (one
    process, one rank: the wait is only the reduction's own time, never negative, counted once)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from verl.trainer.distributed import CollectiveWaits, timed_gradient_allreduce

    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    model = None
    try:
        waits = CollectiveWaits()
        model = DDP(torch.nn.Linear(4, 2))
        model.register_comm_hook(None, timed_gradient_allreduce(waits))
        model(torch.ones(3, 4)).sum().backward()
        assert 0.0 < waits.seconds < 1.0
        assert torch.allclose(model.module.weight.grad, torch.full((2, 4), 3.0))
    finally:
        # the DDP wrapper goes before the group (PPOModels.release_ddp says why): freed with the test's frame
        # after destroy_process_group, its reducer deadlocked this xdist worker once (2026-12-06, load ~9:
        # the main thread past the test's return, a gloo thread with no Python frame)
        del model
        gc.collect()
        dist.destroy_process_group()
