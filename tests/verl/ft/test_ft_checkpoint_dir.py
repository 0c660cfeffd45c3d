"""The checkpoint directory under ordinary accidents: a second trainer on it (lock), a mixture of two runs'
parts (run id in every part), a full disk during a save (injected ENOSPC and a real small tmpfs)."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.verl.ft.hostile import edit_meta, rehash
from tests.verl.ft.test_ft_checkpoint import make_models, save, train_step
from verl.checkpoint import CheckpointError, CheckpointManager, layout, verify
from verl.checkpoint.lock import DirectoryLocked, DirLock
from verl.cli.ckpt import main as ckpt_main

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
ROOT = Path(__file__).resolve().parents[3]


# ---- one writer per directory -------------------------------------------------------------------------
def _hold_lock(root: Path) -> subprocess.Popen[str]:
    code = textwrap.dedent(f"""
        import sys, time
        from verl.checkpoint.lock import DirLock
        DirLock({str(root)!r}, "holder").acquire()
        print("held", flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_is_refused_naming_the_holder_and_a_killed_holder_is_recognised(tmp_path: Path) -> None:
    holder = _hold_lock(tmp_path)
    try:
        with pytest.raises(DirectoryLocked) as refused:
            DirLock(tmp_path, "second").acquire()
        line = str(refused.value)
        assert f"pid {holder.pid}" in line and "run holder" in line and "\n" not in line
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    lock = DirLock(tmp_path, "third")
    lock.acquire()  # the kernel released the dead holder's flock: its file is only what it left behind
    assert lock.previous["pid"] == holder.pid
    assert json.loads((tmp_path / ".lock").read_text())["run_id"] == "third"
    lock.release()


@pytest.mark.slow
def test_verl_train_on_a_held_directory_exits_2_with_one_line(tmp_path: Path) -> None:
    holder = _hold_lock(tmp_path)
    try:
        run = subprocess.run([sys.executable, "-m", "verl.cli.train", "--config", "ppo_tiny", "--checkpoint-dir",
                              str(tmp_path), "trainer.total_steps=2"], cwd=ROOT, capture_output=True, text=True,
                             timeout=240)
    finally:
        holder.kill()
        holder.wait()
    errors = [ln for ln in run.stderr.splitlines() if ln.startswith("verl-train:")]
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert len(errors) == 1 and f"in use by pid {holder.pid}" in errors[0], run.stderr[-2000:]
    assert not list(tmp_path.glob("global_step_*"))


# ---- a mixture never verifies -------------------------------------------------------------------------
def _two_runs(tmp_path: Path) -> tuple[Path, Path]:
    dirs = []
    for name, seed in (("a", 0), ("b", 1)):
        actor, critic, oa, oc = make_models(seed)
        train_step(actor, critic, (oa, oc))
        mgr = CheckpointManager(tmp_path / name, async_save=False)
        save(mgr, 4, actor, critic, oa, oc)
        dirs.append(tmp_path / name / "global_step_4")
    return dirs[0], dirs[1]


@pytest.mark.parametrize("part", ["critic", "optim/actor", "rollout_cache"])
def test_a_part_of_another_run_fails_verify_even_with_a_consistent_manifest(
        tmp_path: Path, part: str, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _two_runs(tmp_path)
    assert verify(a)["run_id"] != verify(b)["run_id"]
    shutil.rmtree(a / part)
    shutil.copytree(b / part, a / part)
    rehash(a)  # what a racing writer's rank 0 computes: a manifest of the files as they are on disk
    assert ckpt_main(["verify", str(a)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("verl-ckpt: mixed checkpoint global_step_4:") and "\n" not in err, err


def test_a_data_file_swapped_under_its_own_writer_record_fails(tmp_path: Path) -> None:
    a, b = _two_runs(tmp_path)
    shutil.copy(b / "actor" / "__0_0.distcp", a / "actor" / "__0_0.distcp")
    rehash(a)
    with pytest.raises(CheckpointError, match="mixed checkpoint global_step_4: actor/__0_0.distcp is not the file"):
        verify(a)


def test_a_checkpoint_from_before_run_ids_still_verifies_and_loads(tmp_path: Path) -> None:
    a, _ = _two_runs(tmp_path)
    for writer in a.rglob("writer-rank*.json"):
        writer.unlink()
    rehash(a)
    edit_meta(a, lambda m: m.pop("run_id") and None)
    assert "run_id" not in verify(a)
    actor, critic, oa, oc = make_models(5)
    assert CheckpointManager(a.parent).load(models={"actor": actor, "critic": critic}) is not None


# ---- a failed save cleans up after itself --------------------------------------------------------------
def _disk_full() -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_injected_enospc_removes_the_partial_save_warns_once_and_the_next_save_succeeds(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    actor, critic, oa, oc = make_models()
    mgr = CheckpointManager(tmp_path, async_save=True)
    save(mgr, 1, actor, critic, oa, oc)
    assert mgr.wait().error is None
    mgr.before_commit.append(_disk_full)  # after the data files: partial shards are on disk
    with caplog.at_level(logging.WARNING, logger="verl.checkpoint.manager"):
        for step in (2, 3):
            save(mgr, step, actor, critic, oa, oc)
            assert "No space left on device" in (mgr.wait(raise_on_error=False).error or "")
            assert not layout.step_dir(tmp_path, step).exists()
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    mgr.before_commit.clear()
    save(mgr, 4, actor, critic, oa, oc)
    assert mgr.wait().error is None
    assert [s for s, _ in layout.list_steps(tmp_path)] == [1, 4]
    verify(layout.step_dir(tmp_path, 4))
    mgr.close()


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs refused: {done.stderr.strip()[:120]}")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_a_really_full_disk_leaves_no_partial_files_and_a_save_succeeds_once_space_is_freed(
        small_tmpfs: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(128, 256)  # 129 KB of fp32 parameters
    root = small_tmpfs / "ck"
    mgr = CheckpointManager(root)
    filler = small_tmpfs / "filler"
    filler.write_bytes(b"\0" * (1024 * 1024 - 64 * 1024))  # leaves 64 KB
    mgr.save(1, models={"actor": model})
    result = mgr.wait(raise_on_error=False)
    assert result is not None and result.error and "disk full" in result.error, result.error
    assert not layout.step_dir(root, 1).exists()
    filler.unlink()
    mgr.save(2, models={"actor": model})
    result = mgr.wait(raise_on_error=False)
    assert result is not None and result.error is None
    verify(layout.step_dir(root, 2))
    mgr.close()


def test_the_in_memory_tier_refuses_fsdp_with_one_line(tmp_path: Path) -> None:
    from verl.checkpoint import make_checkpointer
    from verl.config import TrainerConfigError, load_config
    from verl.utils.clock import SystemClock

    cfg = load_config("ppo_tiny", ["actor.strategy=fsdp", "checkpoint.memory_interval=1"])
    with pytest.raises(TrainerConfigError, match="checkpoint.memory_interval needs actor.strategy=ddp") as refused:
        make_checkpointer(cfg, tmp_path, SystemClock())
    assert "\n" not in str(refused.value)
    ddp = make_checkpointer(load_config("ppo_tiny", []), tmp_path, SystemClock())
    assert ddp.manager.strategy == "ddp"
    ddp.close()


def test_resharded_loader_offsets_never_repeat_a_prompt_and_count_what_they_skip() -> None:
    from verl.trainer.checkpoint_state import resharded_rank_state

    def state(position: int) -> dict:
        return {"dataloader": {"position": position, "batches_consumed": position // 4, "cooldown_skips": 0}}

    # 2 ranks x 4 prompts per global batch of 8, both at the boundary of batch 3: exact on 1 or 4 ranks
    aligned = [state(12), state(12)]
    assert resharded_rank_state(aligned, 0, 1, 8)["dataloader"]["position"] == 3 * 8
    assert [resharded_rank_state(aligned, r, 4, 8)["dataloader"]["position"] for r in range(4)] == [6] * 4
    # rank 1 had begun batch 3 (a cooling skip): every new rank starts at batch 4, nothing read twice
    ragged = [state(12), state(13)]
    assert resharded_rank_state(ragged, 0, 1, 8)["dataloader"]["position"] == 4 * 8
