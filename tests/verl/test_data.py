"""Prompt loading (JSONL, Parquet), resumable order, rank sharding, and the bounded rollout buffer."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl.config import TrainerConfigError
from verl.data import PromptDataset, RLDataLoader, Rollout, RolloutBuffer


def _jsonl(tmp_path: Path, n: int = 10) -> Path:
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(n)))
    return path


def test_jsonl_and_parquet_load_the_same(tmp_path: Path) -> None:
    pq.write_table(pa.table({"prompt": [f"prompt {i}" for i in range(10)]}), tmp_path / "p.parquet")
    assert PromptDataset(str(_jsonl(tmp_path))).prompts == PromptDataset(str(tmp_path / "p.parquet")).prompts


def test_fsspec_url(tmp_path: Path) -> None:
    assert len(PromptDataset(f"file://{_jsonl(tmp_path)}")) == 10


def test_bad_records_name_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": "no prompt"}\n')
    with pytest.raises(TrainerConfigError, match="line 2"):
        PromptDataset(str(bad))


def test_resume_continues_the_same_order(tmp_path: Path) -> None:
    path = str(_jsonl(tmp_path))
    full = RLDataLoader(path, batch_size=4, seed=3)
    expected = [[p.prompt_id for p in full.next_batch()] for _ in range(6)]  # crosses epoch boundaries
    first = RLDataLoader(path, batch_size=4, seed=3)
    got = [[p.prompt_id for p in first.next_batch()] for _ in range(2)]
    resumed = RLDataLoader(path, batch_size=4, seed=3)
    resumed.load_state_dict(first.state_dict())
    got += [[p.prompt_id for p in resumed.next_batch()] for _ in range(4)]
    assert got == expected
    assert sorted(expected[0] + expected[1] + expected[2][:2]) == list(range(10))  # an epoch is a permutation


def test_ranks_split_each_global_batch(tmp_path: Path) -> None:
    path = str(_jsonl(tmp_path, 12))
    whole = RLDataLoader(path, batch_size=4, seed=1).next_batch()
    r0 = RLDataLoader(path, batch_size=4, seed=1, rank=0, world_size=2).next_batch()
    r1 = RLDataLoader(path, batch_size=4, seed=1, rank=1, world_size=2).next_batch()
    assert [p.prompt_id for p in r0 + r1] == [p.prompt_id for p in whole]


def test_worker_processes_give_the_same_batches(tmp_path: Path) -> None:
    path = str(_jsonl(tmp_path))
    plain = RLDataLoader(path, batch_size=4, seed=2)
    workers = RLDataLoader(path, batch_size=4, seed=2, num_workers=1, persistent_workers=True)
    assert [plain.next_batch() for _ in range(3)] == [workers.next_batch() for _ in range(3)]


def _r(i: int, reward: float) -> Rollout:
    return Rollout(prompt_id=i, step=1, prompt="p", response="r", prompt_ids=[1], response_ids=[2],
                   created_at=float(i), reward=reward)


def test_fifo_buffer_evicts_oldest_and_counts() -> None:
    buf = RolloutBuffer(max_size=3, eviction_policy="fifo")
    assert buf.put([_r(i, float(i)) for i in range(5)]) == 2
    assert buf.evictions == 2 and len(buf) == 3
    assert buf.oldest_age(now=10.0) == pytest.approx(8.0)
    assert [r.prompt_id for r in buf.take(10)] == [2, 3, 4]


def test_priority_buffer_evicts_lowest_reward() -> None:
    buf = RolloutBuffer(max_size=3, eviction_policy="priority")
    buf.put([_r(0, 0.9), _r(1, 0.1), _r(2, 0.5), _r(3, 0.7), _r(4, 0.05)])
    assert sorted(r.prompt_id for r in buf.take(10)) == [0, 2, 3]


def test_unbounded_buffer_warns(caplog: pytest.LogCaptureFixture) -> None:
    buf = RolloutBuffer(max_size=-1)
    buf.put([_r(i, 0.0) for i in range(100)])
    assert len(buf) == 100 and buf.evictions == 0
    assert "unbounded" in caplog.text


def test_buffer_state_round_trip() -> None:
    buf = RolloutBuffer(max_size=2)
    buf.put([_r(i, 0.0) for i in range(3)])
    other = RolloutBuffer(max_size=2)
    other.load_state_dict(buf.state_dict())
    assert other.evictions == 1 and [r.prompt_id for r in other.take(5)] == [1, 2]
