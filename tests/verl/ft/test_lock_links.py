"""Issue 36: ``DIR/.lock`` planted as a link to a file elsewhere is refused with one line, and that file is
left untouched (it used to be truncated); checkpoint temporaries are never written through a link."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl.checkpoint import layout
from verl.checkpoint.lock import DirectoryLocked, DirLock

ROOT = Path(__file__).resolve().parents[3]
PRECIOUS = "someone else's file\n"


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_linked_lock_file_is_refused_and_its_target_untouched(tmp_path: Path, kind: str) -> None:
    ckpt, elsewhere = tmp_path / "ckpt", tmp_path / "elsewhere.txt"
    ckpt.mkdir()
    elsewhere.write_text(PRECIOUS)
    (os.symlink if kind == "symlink" else os.link)(elsewhere, ckpt / ".lock")
    with pytest.raises(DirectoryLocked) as refused:
        DirLock(ckpt, "run").acquire()
    assert str(ckpt / ".lock") in str(refused.value) and "\n" not in str(refused.value)
    assert elsewhere.read_text() == PRECIOUS


def test_a_dangling_lock_link_creates_nothing_elsewhere(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    os.symlink(tmp_path / "created-elsewhere", ckpt / ".lock")
    with pytest.raises(DirectoryLocked):
        DirLock(ckpt, "run").acquire()
    assert not (tmp_path / "created-elsewhere").exists()


def test_an_atomic_write_never_writes_through_a_planted_temporary_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text(PRECIOUS)
    target = tmp_path / "ckpt" / "manifest.json"
    target.parent.mkdir()
    os.symlink(elsewhere, target.with_name(f".{target.name}.tmp"))
    layout.atomic_write_bytes(target, b"{}")
    assert target.read_bytes() == b"{}" and elsewhere.read_text() == PRECIOUS


@pytest.mark.slow
def test_verl_train_with_a_linked_lock_exits_2_with_one_line(tmp_path: Path) -> None:
    ckpt, elsewhere = tmp_path / "ckpt", tmp_path / "elsewhere.txt"
    ckpt.mkdir()
    elsewhere.write_text(PRECIOUS)
    os.symlink(elsewhere, ckpt / ".lock")
    run = subprocess.run([sys.executable, "-m", "verl.cli.train", "--config", "ppo_tiny", "--checkpoint-dir",
                          str(ckpt), "trainer.total_steps=2"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    errors = [ln for ln in run.stderr.splitlines() if ln.startswith("verl-train:")]
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert len(errors) == 1 and str(ckpt / ".lock") in errors[0], run.stderr[-2000:]
    assert elsewhere.read_text() == PRECIOUS
