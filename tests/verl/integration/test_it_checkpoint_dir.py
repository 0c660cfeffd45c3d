"""verl-train's checkpoint directory under a preemption (SIGTERM during an async save) and a full disk
(injected ENOSPC, final save included): clean exits, no partial files, no traceback."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.verl.integration.exact_resume_chain import ROOT, kill_when, start
from verl.checkpoint import layout, verify

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:torch.distributed is disabled")]


def train(ckpt: Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "verl.cli.train", "--config", "ppo_tiny", "--checkpoint-dir", str(ckpt),
            "metrics.layer_kl=false", "metrics.prompt_analysis=lexical", *overrides]  # as exact_resume_chain


def sigterm_when(proc: subprocess.Popen[str], marker: str) -> str:
    """SIGTERM the run (a preemption) as soon as ``marker`` is printed; its whole output once it ended."""
    return kill_when(proc, marker, act=lambda p: p.send_signal(signal.SIGTERM))


def test_sigterm_during_an_async_save_finishes_it_and_exits_0(tmp_path: Path) -> None:
    ckpt = tmp_path / "ck"
    # the save of step 2 takes >= 3 s in the background while steps 3, 4... run
    proc = start(train(ckpt, "trainer.total_steps=200", "checkpoint.interval=2", "faults.checkpoint_write_delay_s=3"))
    out = sigterm_when(proc, "step 3/200")
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out
    stopped = [ln for ln in out.splitlines() if "SIGTERM: stopping after step" in ln]
    assert len(stopped) == 1 and "complete" in stopped[0], out[-3000:]
    complete = [s for s, p in layout.list_steps(ckpt) if layout.is_complete(p)]
    assert 2 in complete and max(complete) >= 3  # the in-flight save finished, then the last step was saved
    for step in complete:
        verify(layout.step_dir(ckpt, step))
    assert [s for s, p in layout.list_steps(ckpt) if not layout.is_complete(p)] == []


def test_a_full_disk_fails_saves_cleanly_and_the_final_one_with_one_line(tmp_path: Path) -> None:
    ckpt = tmp_path / "ck"
    run = subprocess.run(train(ckpt, "trainer.total_steps=6", "checkpoint.interval=2",
                               "faults.checkpoint_enospc_at_steps=[2,6]"),
                         cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 2 and "Traceback" not in run.stdout + run.stderr, run.stderr[-3000:]
    errors = [ln for ln in run.stderr.splitlines() if ln.startswith("verl-train:")]
    assert len(errors) == 1 and "global_step_6 failed" in errors[0] and "global_step_4" in errors[0], errors
    assert [s for s, _ in layout.list_steps(ckpt)] == [4]  # 2 and 6 left nothing behind
    verify(layout.step_dir(ckpt, 4))
    # the resumed run's first save succeeds (no debris of the failed ones fills the disk)
    again = subprocess.run(train(ckpt, "trainer.total_steps=6", "checkpoint.interval=2", "--resume"),
                           cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    verify(layout.step_dir(ckpt, 6))


def test_sigterm_with_a_grace_period_shorter_than_the_save_abandons_it_cleanly(tmp_path: Path) -> None:
    ckpt = tmp_path / "ck"
    # one save in flight (step 3's, 60 s of write delay) when the signal is read after step 3 or 4
    proc = start(train(ckpt, "trainer.total_steps=200", "checkpoint.interval=3", "faults.checkpoint_write_delay_s=60",
                       "checkpoint.sigterm_grace_s=1"))
    out = sigterm_when(proc, "step 3/200")
    assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]
    assert re.search(r"SIGTERM: stopping after step \d+: the save in flight did not finish within 1s: abandoned",
                     out), out[-3000:]
    assert not any(layout.is_complete(p) for _, p in layout.list_steps(ckpt))  # nothing half-complete
    again = subprocess.run(train(ckpt, "trainer.total_steps=3", "checkpoint.interval=3", "--resume-or-start"),
                           cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    verify(layout.step_dir(ckpt, 3))  # the abandoned directory was replaced by a whole save
