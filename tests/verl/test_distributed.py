"""torchrun --nproc-per-node 2 on CPU (gloo, DDP): parameters stay identical across ranks."""

from __future__ import annotations

import re
import sys

import pytest

from tests.verl.integration.exact_resume_chain import finish, start
from verl.data.embeddings import semantic_available


@pytest.mark.slow
def test_two_ranks_keep_identical_parameters() -> None:
    # --standalone: torchrun picks a free loopback rendezvous port itself. The default prompt analysis
    # (auto): with the semantic extra installed each rank loads the sentence-embedding model on its metrics
    # thread while it trains. The two-rank hang reproduced under load was a rank stuck at exit after its
    # final digest (test_close_frees_the_ddp_wrappers_before_the_process_group), not that model; on a
    # timeout finish() kills every rank and prints the output
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "verl.cli.train", "--config", "ppo_tiny",
           "trainer.total_steps=3", "data.batch_size=8", "actor.ppo_mini_batch_size=4", "critic.ppo_mini_batch_size=4"]
    proc = start(cmd)
    out = finish(proc)  # on a timeout: every rank killed, the output printed
    assert proc.returncode == 0, out[-3000:]
    final = dict(re.findall(r"rank=(\d) step=3 param_sha256=([0-9a-f]{64})", out))
    initial = dict(re.findall(r"rank=(\d) step=0 initial param_sha256=([0-9a-f]{64})", out))
    assert set(final) == {"0", "1"} and set(initial) == {"0", "1"}
    assert final["0"] == final["1"]
    assert final["0"] != initial["0"]   # updates really happened
    if semantic_available():  # both ranks ran the semantic path next to the collectives
        assert out.count("sentence-embedding model loaded") == 2, out[-3000:]


def test_close_frees_the_ddp_wrappers_before_the_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DDP reducer still alive after ``destroy_process_group`` holds the group's last reference and frees
    it with the GIL held; a gloo worker still freeing its last collective's tensors needs the GIL there,
    so the join in the group's destructor never returned (verl-train hung at exit under load, both ranks'
    final digests printed). ``close()`` frees the wrappers first. One process, a one-rank gloo group."""
    import weakref

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from verl.trainer import ppo_trainer
    from verl.trainer.distributed import DistContext

    trainer = ppo_trainer.RLTrainer("ppo_tiny", overrides=["metrics.prompt_analysis=lexical"])
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        m = trainer.models
        m.actor_ddp, m.critic_ddp = DDP(m.actor), DDP(m.critic)
        wrappers = [weakref.ref(m.actor_ddp), weakref.ref(m.critic_ddp)]
        trainer.ctx = DistContext(own_group=True)  # close() destroys this group
        alive = _alive_at_shutdown(monkeypatch, wrappers)
        trainer.close()
        assert alive == [False, False]  # both reducers gone when the group is destroyed
        assert not dist.is_initialized()
        assert m.actor_ddp is m.actor and m.critic_ddp is m.critic  # a step after close() still has modules
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_a_failed_construction_closes_what_it_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reward model that fails to load is raised after the process group and the DDP wrappers exist: the
    constructor frees the wrappers, then destroys the group (the exit deadlock above otherwise waits at
    interpreter exit), and the caller still sees the reward model's error."""
    import weakref

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from verl.trainer import ppo_trainer
    from verl.trainer.distributed import DistContext

    def one_rank_group(backend: str, single_process_group: bool = False) -> DistContext:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        return DistContext(own_group=True)

    wrappers: list[weakref.ref] = []
    real_build = ppo_trainer.build_models

    def build_wrapped(*args: object):  # noqa: ANN202 -- returns PPOModels
        m = real_build(*args)
        m.actor_ddp, m.critic_ddp = DDP(m.actor), DDP(m.critic)
        wrappers.extend([weakref.ref(m.actor_ddp), weakref.ref(m.critic_ddp)])
        return m

    def no_reward_model(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("reward.path: /nowhere/rm does not exist")

    alive = _alive_at_shutdown(monkeypatch, wrappers)
    monkeypatch.setattr(ppo_trainer, "init_distributed", one_rank_group)
    monkeypatch.setattr(ppo_trainer, "build_models", build_wrapped)
    monkeypatch.setattr(ppo_trainer, "load_reward_model", no_reward_model)
    try:
        with pytest.raises(FileNotFoundError, match="/nowhere/rm"):
            ppo_trainer.RLTrainer("ppo_tiny", overrides=["metrics.prompt_analysis=lexical"])
        assert len(wrappers) == 2 and alive == [False, False]  # wrappers freed, then the group destroyed
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _alive_at_shutdown(monkeypatch: pytest.MonkeyPatch, wrappers: list) -> list[bool]:
    """The trainer's ``shutdown`` records, as it runs, which of ``wrappers`` (weak references to DDP
    wrappers, read when it runs) are still alive, then destroys the group as before."""
    from verl.trainer import ppo_trainer
    from verl.trainer.distributed import DistContext

    alive: list[bool] = []
    real_shutdown = ppo_trainer.shutdown

    def recording(ctx: DistContext) -> None:
        alive.extend(w() is not None for w in wrappers)
        real_shutdown(ctx)

    monkeypatch.setattr(ppo_trainer, "shutdown", recording)
    return alive
