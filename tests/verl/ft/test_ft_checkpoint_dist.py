"""Two gloo ranks: the actor's parameters are sharded (DTensor, Shard(0)), the critic replicated.
Each rank writes its own shard file; the digest and a 1-process load see the full, identical state."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp_mp

from verl.checkpoint import CheckpointError, CheckpointManager, digest_checkpoint, digest_models, verify

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
WORLD = 2


def build(seed: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)), torch.nn.Linear(8, 1)


def shard(model: torch.nn.Module, mesh) -> torch.nn.Module:
    from torch.distributed.tensor import Shard, distribute_tensor

    for mod in model.modules():
        for name, p in list(mod.named_parameters(recurse=False)):
            mod.register_parameter(name, torch.nn.Parameter(distribute_tensor(p.data, mesh, [Shard(0)])))
    return model


def rank_main(rank: int, init_file: str, root: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        mesh = init_device_mesh("cpu", (WORLD,))
        actor, critic = build(0)
        shard(actor, mesh)
        opt = torch.optim.SGD(actor.parameters(), lr=0.1, momentum=0.9)
        loss = sum((p * p).sum() for p in actor.parameters())
        loss.full_tensor().backward() if hasattr(loss, "full_tensor") else loss.backward()
        opt.step()
        mgr = CheckpointManager(root, async_save=True)
        torch.manual_seed(100 + rank)  # per-rank RNG streams must come back per rank
        mgr.save(5, models={"actor": actor, "critic": critic}, optimizers={"actor": opt},
                 rollout_cache=[{"timestamp": float(rank), "rank": rank}])
        mgr.wait()
        draw = float(torch.rand(1))
        digest = digest_models({"actor": actor, "critic": critic})

        actor2, critic2 = build(7)
        shard(actor2, mesh)
        opt2 = torch.optim.SGD(actor2.parameters(), lr=0.1, momentum=0.9)
        loaded = CheckpointManager(root).load(models={"actor": actor2, "critic": critic2}, optimizers={"actor": opt2})
        same_local = all(
            torch.equal(a.to_local(), b.to_local()) for a, b in zip(actor.parameters(), actor2.parameters(), strict=True)
        )
        momentum = [opt2.state[p]["momentum_buffer"].to_local() for p in actor2.parameters()]
        want = [opt.state[p]["momentum_buffer"].to_local() for p in actor.parameters()]
        out = {
            "digest": digest, "reloaded_digest": digest_models({"actor": actor2, "critic": critic2}),
            "same_local": same_local, "same_momentum": all(torch.equal(a, b) for a, b in zip(momentum, want, strict=True)),
            "draw": draw, "draw_after_load": float(torch.rand(1)), "rows": loaded.rollout_cache.to_pylist(),
        }
        Path(root, f"rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_rank_sharded_save_load_and_reshard() -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "ckpt"
        tmp_mp.spawn(rank_main, args=(os.path.join(d, "init"), str(root)), nprocs=WORLD, join=True)
        r0, r1 = (json.loads((root / f"rank{r}.json").read_text()) for r in range(WORLD))
        ckpt = root / "global_step_5"
        meta = verify(ckpt)
        assert meta["world_size"] == 2 and len(meta["rng"]) == 2 and meta["rng"][0] != meta["rng"][1]
        assert {"actor/__0_0.distcp", "actor/__1_0.distcp"} <= set(meta["manifest"])
        a0, a1 = meta["manifest"]["actor/__0_0.distcp"], meta["manifest"]["actor/__1_0.distcp"]
        assert a0["sha256"] != a1["sha256"]  # each rank holds a different half, not a replica
        for r in (r0, r1):
            assert r["same_local"] and r["same_momentum"] and r["digest"] == r["reloaded_digest"]
            assert r["draw"] == r["draw_after_load"]
        assert r0["digest"] == r1["digest"] == digest_checkpoint(ckpt)
        assert r0["rows"] == [{"timestamp": 0.0, "rank": 0}] and r1["rows"] == [{"timestamp": 1.0, "rank": 1}]

        # one process: refused by default, resharded by DCP on request, same digest either way
        actor, critic = build(3)
        with pytest.raises(CheckpointError, match="world size mismatch: global_step_5 was saved by 2 ranks"):
            CheckpointManager(root).load(models={"actor": actor, "critic": critic})
        loaded = CheckpointManager(root).load(models={"actor": actor, "critic": critic}, allow_reshard=True)
        assert loaded.step == 5 and loaded.rollout_cache.num_rows == 2
        assert digest_models({"actor": actor, "critic": critic}) == r0["digest"]
