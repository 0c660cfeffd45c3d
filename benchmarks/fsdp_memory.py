"""Per-rank parameter + optimizer bytes and step time, DDP vs FSDP2, 1 and 2 ranks (CPU, gloo).

    python benchmarks/fsdp_memory.py --json            # GPT-2-style, 4 blocks, n_embd 256
    python benchmarks/fsdp_memory.py --n-layer 2 --n-embd 64 --steps 3

Each configuration runs in its own processes (torch.multiprocessing, a TCP store on a free port) through
the trainer's own wrapping: DDP from torch, FSDP through ``verl.trainer.fsdp.shard`` (a block per unit plus
the root). Bytes are the tensors a rank really holds (a DTensor's local shard; AdamW's ``exp_avg`` and
``exp_avg_sq``), step time the median of ``--steps`` forward/backward/AdamW steps on random tokens.
FSDP's per-rank state should fall about 1/N; DDP's stays whole on every rank.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from harness.ports import free_port  # noqa: E402


def _local_bytes(t: torch.Tensor) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def _worker(rank: int, world: int, port: int, strategy: str, args: argparse.Namespace, out: Any) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    from verl.trainer import fsdp

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=args.n_layer, n_embd=args.n_embd, n_head=4, vocab_size=259, n_positions=64,
                     bos_token_id=258, eos_token_id=257, loss_type="ForCausalLM")
    model = GPT2LMHeadModel(cfg)
    device = torch.device("cpu")
    if strategy == "fsdp":
        fsdp.shard(model, fsdp.mesh_for(device, world), fsdp.precision_for(device), "actor.strategy")
        trained: torch.nn.Module = model
    else:
        trained = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    optim = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(rank)
    times = []
    for _ in range(args.steps):
        ids = torch.randint(0, 259, (args.batch // world, 48), generator=gen)
        t0 = time.perf_counter()
        loss = trained(input_ids=ids, labels=ids).loss
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    params = sum(_local_bytes(p) for p in model.parameters())
    opt_state = sum(_local_bytes(v) for s in optim.state.values() for v in s.values()
                    if isinstance(v, torch.Tensor) and v.dim() > 0)
    out.put({"strategy": strategy, "world_size": world, "rank": rank, "param_bytes": params,
             "optimizer_bytes": opt_state, "state_bytes": params + opt_state,
             "step_s_median": statistics.median(times)})
    dist.destroy_process_group()


def measure(strategy: str, world: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, strategy, args, out)) for r in range(world)]
    for p in procs:
        p.start()
    rows = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return sorted(rows, key=lambda r: r["rank"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--batch", type=int, default=8, help="sequences per step across all ranks")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    args = p.parse_args(argv)
    runs = {f"{s}_{w}": measure(s, w, args) for s in ("ddp", "fsdp") for w in (1, 2)}
    summary = {k: {"state_bytes_per_rank": max(r["state_bytes"] for r in rows),
                   "param_bytes_per_rank": max(r["param_bytes"] for r in rows),
                   "optimizer_bytes_per_rank": max(r["optimizer_bytes"] for r in rows),
                   "step_s": max(r["step_s_median"] for r in rows)} for k, rows in runs.items()}
    ratios = {"fsdp_2_over_1_state": summary["fsdp_2"]["state_bytes_per_rank"] / summary["fsdp_1"]["state_bytes_per_rank"],
              "ddp_2_over_1_state": summary["ddp_2"]["state_bytes_per_rank"] / summary["ddp_1"]["state_bytes_per_rank"],
              "fsdp_over_ddp_step_s_2_ranks": summary["fsdp_2"]["step_s"] / summary["ddp_2"]["step_s"]}
    doc = {"model": {"n_layer": args.n_layer, "n_embd": args.n_embd}, "batch": args.batch, "steps": args.steps,
           "summary": summary, "ratios": ratios, "runs": runs}
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        for k, v in summary.items():
            print(f"{k:7s} state/rank {v['state_bytes_per_rank'] / 1e6:8.2f} MB  (params {v['param_bytes_per_rank'] / 1e6:.2f}"
                  f" + optim {v['optimizer_bytes_per_rank'] / 1e6:.2f})  step {v['step_s'] * 1e3:7.1f} ms")
        print(" ".join(f"{k}={v:.3f}" for k, v in ratios.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
