"""The in-memory checkpoint tier (``checkpoint.memory_interval``): a SIGKILLed trainer resumes from the
last step's snapshot in tmpfs instead of the last disk checkpoint, and ends with the same ``verl-ckpt
digest`` as an uninterrupted run; a tampered snapshot is refused and the disk tier used instead."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.verl.integration.exact_resume_chain import command, digest, finish, prompts, start

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _memory(tmp_path: Path, name: str) -> tuple[str, str]:
    return "checkpoint.memory_interval=1", f"checkpoint.memory_dir={tmp_path / name}"


def _killed_at_6(tmp_path: Path) -> tuple[Path, Path, Path]:
    data = prompts(tmp_path)
    ref_dir, dir_ = tmp_path / "uninterrupted", tmp_path / "killed"
    reference = start(command(1, data, ref_dir))
    # Steps 4-6 idle 1.5 s in their rollout before the kill inside step 6: the background writers of the
    # disk checkpoint of step 3 and the snapshots of steps 4-5 then finish first. Without it, on a loaded
    # machine the kill came while the step-4 snapshot wrote its COMPLETE marker and step 3's disk save was
    # still in flight: both tiers were older than the test's premise (the product's resume was right).
    pace = ("faults.slow_rank=0", "faults.slow_rank_seconds=1.5", "faults.slow_rank_from_step=4")
    first = start(command(1, data, dir_, *_memory(tmp_path, "mem"), *pace, "faults.kill_trainer_at_step=6"))
    out = finish(first)
    assert first.returncode != 0 and "step 5/8" in out and "step 6/8" not in out, out[-2000:]
    out_ref = finish(reference)
    assert reference.returncode == 0, out_ref[-3000:]
    tiers = sorted(str(f.relative_to(tmp_path)) for f in tmp_path.glob("*/global_step_*/*COMPLETE*"))
    assert (dir_ / "global_step_3" / "COMPLETE").is_file(), f"the premise: disk step 3 complete; got {tiers}"
    return data, ref_dir, dir_


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    """One reference run and one run killed at step 6 for both tests (two trainer starts and 13 steps fewer);
    the killed run's disk and tmpfs tiers are kept aside, and each test resumes from its own fresh copy
    at the same paths (the checkpoint names its snapshot directory)."""
    tmp = tmp_path_factory.mktemp("memory_tier")
    data, ref_dir, dir_ = _killed_at_6(tmp)
    for name in ("killed", "mem"):
        shutil.copytree(tmp / name, tmp / f"{name}.kept", symlinks=True)
    return tmp, data, ref_dir, dir_


def _fresh_copy(killed: tuple[Path, Path, Path, Path]) -> tuple[Path, Path, Path, Path]:
    tmp = killed[0]
    for name in ("killed", "mem"):
        shutil.rmtree(tmp / name, ignore_errors=True)
        shutil.copytree(tmp / f"{name}.kept", tmp / name, symlinks=True)
    return killed


@pytest.mark.slow
def test_sigkill_resumes_from_the_memory_snapshot_exactly(killed_run: tuple[Path, Path, Path, Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    tmp_path, data, ref_dir, dir_ = _fresh_copy(killed_run)
    snapshots = sorted((tmp_path / "mem").glob("global_step_*/COMPLETE"))
    assert snapshots, "no complete in-memory snapshot"
    newest = int(snapshots[-1].parent.name.rsplit("_", 1)[1])
    assert newest > 3, snapshots  # newer than the last disk checkpoint (interval 3)
    last = start(command(1, data, dir_, *_memory(tmp_path, "mem"), resume=True))
    out = finish(last)
    assert last.returncode == 0, out[-3000:]
    assert f"resumed from step {newest}" in out and "in-memory snapshot" in out, out[-3000:]
    assert digest(dir_, capsys) == digest(ref_dir, capsys)
    assert not (tmp_path / "mem").exists()  # a finished run frees the RAM its snapshots held


@pytest.mark.slow
def test_tampered_memory_snapshot_falls_back_to_disk(killed_run: tuple[Path, Path, Path, Path],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    tmp_path, data, ref_dir, dir_ = _fresh_copy(killed_run)
    newest = sorted((tmp_path / "mem").glob("global_step_*/COMPLETE"))[-1].parent
    target = newest / "actor.safetensors"
    blob = bytearray(target.read_bytes())
    blob[-1] ^= 0xFF  # one flipped bit in a weight
    target.write_bytes(bytes(blob))
    last = start(command(1, data, dir_, *_memory(tmp_path, "mem"), resume=True))
    out = finish(last)
    assert last.returncode == 0, out[-3000:]
    assert "unusable, resuming from disk" in out and "checksum mismatch" in out, out[-3000:]
    assert "resumed from step 3" in out
    assert digest(dir_, capsys) == digest(ref_dir, capsys)
