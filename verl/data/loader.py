"""Prompt dataset (JSONL or Parquet, local or fsspec URL) and ``RLDataLoader``, a resumable wrapper
around ``torch.utils.data.DataLoader``.

Order is a pure function of (seed, epoch, batch index, rank): batch ``n`` is the same on every run, and
resuming only needs the number of batches already consumed — not the DataLoader iterator, whose workers
prefetch ahead of what the trainer actually used.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from verl.config.errors import TrainerConfigError
from verl.data.semantic_clusters import prompt_clusters


@dataclass(frozen=True)
class PromptItem:
    prompt_id: int
    """Row index in the dataset: stable identity for seeding, dedup and acknowledgements."""
    prompt: str


class PromptDataset(Dataset):
    def __init__(self, source: str, prompt_key: str = "prompt") -> None:
        self.source = source
        self.prompts = [str(r[prompt_key]) for r in _read_records(source, prompt_key)]
        if not self.prompts:
            raise TrainerConfigError(f"data.prompt_dataset '{source}' holds no prompts; give a non-empty JSONL/Parquet file")

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, index: int) -> PromptItem:
        return PromptItem(index, self.prompts[index])


def _read_records(source: str, prompt_key: str) -> list[dict[str, Any]]:
    data = _read_bytes(source)
    name = source.lower()
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        table = pq.read_table(io.BytesIO(data))
        if prompt_key not in table.column_names:
            raise TrainerConfigError(f"data.prompt_dataset '{source}': no column '{prompt_key}'; set data.prompt_key")
        return table.select([prompt_key]).to_pylist()
    records = []
    for lineno, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise TrainerConfigError(f"data.prompt_dataset '{source}' line {lineno}: not JSON; one object per line") from None
        if not isinstance(record, dict) or prompt_key not in record:
            raise TrainerConfigError(f"data.prompt_dataset '{source}' line {lineno}: no '{prompt_key}' field; set data.prompt_key")
        records.append(record)
    return records


def _read_bytes(source: str) -> bytes:
    if source.startswith("builtin:"):
        name = source.removeprefix("builtin:")
        ref = resources.files("verl.data").joinpath(f"{name}.jsonl")
        if not ref.is_file():
            raise TrainerConfigError(f"data.prompt_dataset '{source}': no such bundled dataset; try builtin:toy_prompts")
        return ref.read_bytes()
    if "://" in source:
        import fsspec

        try:
            with fsspec.open(source, "rb") as fh:
                return fh.read()
        except (FileNotFoundError, ImportError, ValueError, OSError) as exc:
            raise TrainerConfigError(f"data.prompt_dataset '{source}': cannot open ({exc}); check the URL and fsspec backend") from None
    path = Path(source)
    if not path.is_file():
        raise TrainerConfigError(f"data.prompt_dataset file '{source}' not found; give a JSONL or Parquet path")
    return path.read_bytes()


class ResumableBatchSampler(Sampler[list[int]]):
    """Endless rank-local index batches, starting at global batch ``start``."""

    def __init__(self, n_items: int, batch_size: int, seed: int, shuffle: bool, rank: int, world_size: int,
                 start: int = 0) -> None:
        if batch_size % world_size:
            raise TrainerConfigError(f"data.batch_size {batch_size} must be divisible by the world size {world_size}")
        self.n_items, self.batch_size, self.seed, self.shuffle = n_items, batch_size, seed, shuffle
        self.rank, self.world_size, self.start = rank, world_size, start

    def batch_indices(self, batch: int) -> list[int]:
        """Global batch ``batch``, rank-local slice. Batches wrap across epoch boundaries."""
        first = batch * self.batch_size
        out = [self._index_at(first + i) for i in range(self.batch_size)]
        per_rank = self.batch_size // self.world_size
        return out[self.rank * per_rank:(self.rank + 1) * per_rank]

    def _index_at(self, position: int) -> int:
        epoch, offset = divmod(position, self.n_items)
        if not self.shuffle:
            return offset
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return int(torch.randperm(self.n_items, generator=gen)[offset])

    def __iter__(self) -> Iterator[list[int]]:
        batch = self.start
        while True:
            yield self.batch_indices(batch)
            batch += 1


def _collate(items: list[PromptItem]) -> list[PromptItem]:
    return items


PromptFilter = Callable[[list[PromptItem]], list[PromptItem]]


class StepClock:
    """The data guards' clock: ``step × step_seconds`` of training time. Cooldowns measured on it admit
    the same prompts in an interrupted-and-resumed run as in an uninterrupted one, which wall time
    cannot promise."""

    def __init__(self, step_seconds: float = 60.0) -> None:
        self.step_seconds = step_seconds
        self.step = 0

    def now(self) -> float:
        return self.step * self.step_seconds

    def monotonic(self) -> float:
        return self.now()

    def sleep(self, seconds: float) -> None:  # training time only moves with steps
        return None


class _Subset(Dataset):
    """The dataset minus near-duplicates; items keep their original row index as ``prompt_id``."""

    def __init__(self, dataset: PromptDataset, keep: list[int]) -> None:
        self.dataset, self.keep = dataset, keep

    def __len__(self) -> int:
        return len(self.keep)

    def __getitem__(self, index: int) -> PromptItem:
        return self.dataset[self.keep[index]]


class RLDataLoader:
    """Prompt batches for PPO, always ``batch_size / world_size`` prompts per rank (DDP needs every rank
    to run the same number of updates).

    Data guards (``clusters``, a ``verl.data.guards.PromptClusters``; the trainer passes one by default,
    ``data.dedup``): near-duplicate prompts are removed from the dataset once, and a prompt whose
    MinHash-LSH cluster supplied one less than the cooldown ago is skipped for the next candidate in the
    rank's stream; when a whole dataset's worth of candidates is cooling, the coolest fill the batch
    instead of starving it. ``filters`` run on each batch afterwards. Without ``clusters``,
    ``dedup_method`` ("minhash" | "semantic", ``verl.data.semantic_clusters``) builds them with
    ``cooldown_minutes`` on ``clock``; semantic compares prompts by sentence embedding, so paraphrases
    share a cluster.
    """

    def __init__(self, dataset: PromptDataset | str, batch_size: int, *, seed: int = 0, shuffle: bool = True,
                 num_workers: int = 0, persistent_workers: bool = False, pin_memory: bool = False,
                 rank: int = 0, world_size: int = 1, prompt_key: str = "prompt",
                 filters: Sequence[PromptFilter] = (), clusters: Any = None, dedup_method: str | None = None,
                 cooldown_minutes: float = 30.0, clock: Any = None) -> None:
        if clusters is None and dedup_method is not None:
            clusters = prompt_clusters(dedup_method, cooldown_minutes=cooldown_minutes, clock=clock)
        self.dataset = dataset if isinstance(dataset, PromptDataset) else PromptDataset(dataset, prompt_key)
        self.batch_size = batch_size
        self.seed, self.shuffle, self.rank, self.world_size = seed, shuffle, rank, world_size
        if batch_size % world_size:
            raise TrainerConfigError(f"data.batch_size {batch_size} must be divisible by the world size {world_size}")
        self.per_rank = batch_size // world_size
        self.loader_kwargs = {"num_workers": num_workers, "pin_memory": pin_memory,
                              "persistent_workers": persistent_workers and num_workers > 0}
        self.filters = list(filters)
        self.clusters = clusters
        keep = clusters.dedup(self.dataset.prompts) if clusters is not None else list(range(len(self.dataset)))
        self.duplicates_removed = len(self.dataset) - len(keep)
        self.source: Dataset = self.dataset if not self.duplicates_removed else _Subset(self.dataset, keep)
        self.position = 0
        """Prompts of this rank's stream consumed so far (admitted or skipped): the resumable offset."""
        self.cooldown_skips = 0
        self._iter: Iterator[list[PromptItem]] | None = None
        self._pending: list[PromptItem] = []

    @property
    def batches_consumed(self) -> int:
        return self.position // self.per_rank

    def _make_iter(self) -> Iterator[list[PromptItem]]:
        sampler = ResumableBatchSampler(len(self.source), self.batch_size, self.seed, self.shuffle,
                                        self.rank, self.world_size, start=self.position // self.per_rank)
        loader = DataLoader(self.source, batch_sampler=sampler, collate_fn=_collate, **self.loader_kwargs)
        return iter(loader)

    def _next_item(self) -> PromptItem:
        if self._iter is None:
            self._iter = self._make_iter()
            self._pending = list(next(self._iter))[self.position % self.per_rank:]
        if not self._pending:
            self._pending = list(next(self._iter))
        self.position += 1
        return self._pending.pop(0)

    def next_batch(self) -> list[PromptItem]:
        if self.clusters is None:
            batch = [self._next_item() for _ in range(self.per_rank)]
        else:
            batch = self._admitted_batch()
        for keep in self.filters:
            batch = keep(batch)
        return batch

    def _admitted_batch(self) -> list[PromptItem]:
        admitted: list[PromptItem] = []
        cooling: list[PromptItem] = []
        for _ in range(max(len(self.source), self.per_rank)):
            if len(admitted) == self.per_rank:
                break
            item = self._next_item()
            (admitted if self.clusters.admit(item.prompt).admitted else cooling).append(item)
        self.cooldown_skips += len(cooling)
        if len(admitted) < self.per_rank:
            # everything is cooling: the coolest prompts (stable order on ties) rather than no batch, each
            # once (the scan may have wrapped into the next epoch); repeats only if the dataset is that small
            cooling.sort(key=lambda it: -self.clusters.cooled_for(it.prompt))
            chosen = {it.prompt_id for it in admitted}
            for item in cooling:
                if len(admitted) < self.per_rank and item.prompt_id not in chosen:
                    admitted.append(item)
                    chosen.add(item.prompt_id)
            admitted += cooling[:self.per_rank - len(admitted)]
        return admitted

    def __iter__(self) -> Iterator[list[PromptItem]]:
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "batches_consumed": self.batches_consumed, "seed": self.seed,
                "dataset_size": len(self.dataset), "cooldown_skips": self.cooldown_skips,
                "clusters": self.clusters.state_dict() if self.clusters is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state.get("position", int(state["batches_consumed"]) * self.per_rank))
        self.cooldown_skips = int(state.get("cooldown_skips", 0))
        if self.clusters is not None and state.get("clusters") is not None:
            self.clusters.load_state_dict(state["clusters"])
        self._iter = None  # rebuilt lazily from the restored offset
        self._pending = []
