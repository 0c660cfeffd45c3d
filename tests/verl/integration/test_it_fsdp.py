"""FSDP2 on 2 CPU ranks (torchrun, gloo): a run killed with -9 and resumed on 2 ranks ends bit-identical to
an uninterrupted one; its sharded checkpoint is about the size of a 1-rank one; it resumes on 1 rank (2->1)
with the loaded parameters bit-equal and no prompt skipped, and that run's checkpoint on 2 ranks again
(1->2). A DDP run refuses an FSDP checkpoint with one line."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.verl.integration.exact_resume_chain import ROOT, command, digest, finish, prompts, start

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:torch.distributed is disabled")]

FSDP = ["actor.strategy=fsdp", "critic.strategy=fsdp", "data.dedup=false", "trainer.total_steps=4",
        "checkpoint.interval=2", "data.batch_size=8", "actor.ppo_mini_batch_size=4",
        "critic.ppo_mini_batch_size=4", "rollout.prefetch_batches=0"]
SHA = re.compile(r"rank=0 step=(\d+) (initial )?param_sha256=([0-9a-f]{64})")


def run(ranks: int, data: Path, ckpt: Path, *extra: str, resume: bool = False) -> str:
    proc = start(command(ranks, data, ckpt, *FSDP, *extra, resume=resume))
    out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    return out


def shas(out: str) -> dict[tuple[int, bool], str]:
    """(step, initial?) -> rank 0's parameter digest, as the trainer logs it (full tensors, any sharding)."""
    return {(int(m[1]), bool(m[2])): m[3] for m in SHA.finditer(out)}


def size(step_dir: Path) -> int:
    return sum(p.stat().st_size for p in step_dir.rglob("*") if p.is_file())


def test_fsdp_two_ranks_kill9_resume_exact_and_reshard_2_to_1_to_2(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    data = prompts(tmp_path)
    ref_dir, dir_ = tmp_path / "uninterrupted", tmp_path / "killed"
    out_ref = run(2, data, ref_dir)
    # a synchronous save here: the kill inside step 3 must find step 2 committed (the other runs save async)
    killed = start(command(2, data, dir_, *FSDP, "faults.kill_trainer_at_step=3", "checkpoint.async_save=false"))
    out = finish(killed)
    assert killed.returncode != 0 and "step 3/4" not in out, out[-2000:]
    assert (dir_ / "global_step_2" / "COMPLETE").exists(), out[-2000:]
    resharded = tmp_path / "resharded"
    shutil.copytree(dir_, resharded)

    out = run(2, data, dir_, resume=True)
    assert "resumed from step 2" in out
    assert digest(dir_, capsys) == digest(ref_dir, capsys)  # bit-identical to the uninterrupted run
    assert shas(out)[(4, False)] == shas(out_ref)[(4, False)]

    # 2 -> 1: the loaded state is the saved one, the loader resumes at the next global batch
    out_1 = run(1, data, resharded, resume=True)
    assert shas(out_1)[(2, True)] == shas(out)[(2, True)]
    assert "resharded resume 2 -> 1 ranks: rank 0 starts at global batch 2 (0 prompt(s)" in out_1, out_1[-3000:]
    assert digest(resharded, capsys).startswith("step=4 ")
    # sharded: each rank wrote only its shards, so 2 ranks' checkpoint ~ 1 rank's of the same shapes
    assert size(ref_dir / "global_step_4") <= 1.3 * size(resharded / "global_step_4")

    # 1 -> 2, and it trains on
    out_2 = run(2, data, resharded, "trainer.total_steps=5", resume=True)
    assert shas(out_2)[(4, True)] == shas(out_1)[(4, False)]
    assert "resharded resume 1 -> 2 ranks" in out_2 and "step 5/5" in out_2

    ddp = subprocess.run(command(1, data, resharded, "trainer.total_steps=6", resume=True), cwd=ROOT,
                         capture_output=True, text=True, timeout=240)
    errors = [ln for ln in ddp.stderr.splitlines() if ln.startswith("verl-train:")]
    assert ddp.returncode == 2 and len(errors) == 1 and "strategy mismatch" in errors[0], ddp.stderr[-2000:]
