"""kill -9 exactness: a run SIGKILLed three times -- inside a step, during an async checkpoint save, and at
an arbitrary moment from outside -- and resumed each time ends with the same ``verl-ckpt digest`` as an
uninterrupted run, on 1 rank and on 2 ranks (torchrun, gloo).

The runs use a 40-prompt dataset so the prompt-cluster cooldown really refuses prompts (its state must
survive the kill), a prefetch backlog so the rollout buffer is non-empty in every checkpoint, and the reward
guard and circuit breaker as always."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.verl.integration.exact_resume_chain import run_chain

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


@pytest.mark.slow
def test_three_kills_one_rank_resume_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_chain(1, tmp_path, capsys)
