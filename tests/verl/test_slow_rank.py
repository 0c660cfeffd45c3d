"""faults.slow_rank: a straggler's sleep inside one stage's timer, on its rank only (issue 33.6). The torchrun
run whose slow rank the monitor pages is in tests/monitor/test_monitor_stragglers.py."""

from __future__ import annotations

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
