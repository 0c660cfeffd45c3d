"""The data guards as the trainer wires them: the cooldown-aware loader keeps every batch full and resumes
mid-stream exactly; invalid rollouts are masked, not trained on; the buffer sheds its backlog."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl.data import Rollout, RolloutBuffer
from verl.data.guards import PromptClusters
from verl.data.loader import RLDataLoader, StepClock
from verl.trainer.batch import collate_rollouts
from verl.trainer.guards import pause_label


def loader(path: Path, clock: StepClock) -> RLDataLoader:
    clusters = PromptClusters(cooldown_minutes=3, clock=clock)  # 3 steps of 60 s
    return RLDataLoader(str(path), batch_size=4, seed=5, clusters=clusters)


@pytest.fixture()
def prompts(tmp_path: Path) -> Path:
    path = tmp_path / "p.jsonl"
    nouns = ["sea", "moon", "city", "river", "forest", "snow", "book", "garden", "bridge", "storm"]
    path.write_text("".join(json.dumps({"prompt": f"Q: Describe the {n} at dawn. A:"}) + "\n" for n in nouns))
    return path


def batches(dl: RLDataLoader, clock: StepClock, steps: range) -> list[list[int]]:
    out = []
    for step in steps:
        clock.step = step
        out.append([p.prompt_id for p in dl.next_batch()])
    return out


def test_cooldown_loader_keeps_batches_full_and_resumes_mid_stream(prompts: Path) -> None:
    clock = StepClock()
    full = loader(prompts, clock)
    expected = batches(full, clock, range(1, 9))
    assert all(len(b) == 4 and len(set(b)) == 4 for b in expected)  # full, and no prompt twice in a batch
    assert full.cooldown_skips > 0  # 10 prompts, 4 per step, 3-step cooldown: some must wait

    clock_a = StepClock()
    first = loader(prompts, clock_a)
    got = batches(first, clock_a, range(1, 4))
    assert first.position % first.per_rank  # skipped prompts put the resume point inside a sampler batch
    state = json.loads(json.dumps(first.state_dict()))  # what meta.json holds
    clock_b = StepClock()
    resumed = loader(prompts, clock_b)
    resumed.load_state_dict(state)
    got += batches(resumed, clock_b, range(4, 9))
    assert got == expected


def test_invalid_rollouts_are_masked_rows() -> None:
    rows = [Rollout(i, 1, "Q: x A:", "ok", [1, 2], [3, 4], 0.0, reward=1.0) for i in range(2)]
    rows[1].extra["dropped"] = True
    batch = collate_rollouts(rows, pad_token_id=0, response_length=4)
    assert batch.response_mask[0].sum() == 2 and batch.response_mask[1].sum() == 0


def test_buffer_shed_keeps_the_newest_and_counts_evictions() -> None:
    buffer = RolloutBuffer(100, "priority")
    buffer.put([Rollout(i, 1, "p", "r", [1], [2], float(i), reward=float(i)) for i in range(10)])
    assert buffer.shed(keep_newest=3) == 7 and buffer.evictions == 7
    assert [r.prompt_id for r in buffer.take(10)] == [7, 8, 9]


def test_pause_labels_match_the_prometheus_rules() -> None:
    assert pause_label("variance_jump", [0.1, 0.2]) == "variance_jump"
    assert pause_label("extreme_values", [0.1, 9.0]) == "extreme_ratio"
    assert pause_label("extreme_values", [0.1, float("nan")]) == "nonfinite_reward"
