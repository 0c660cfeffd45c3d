"""The checkpoint hook inside the real trainer: SIGKILL + resume ends bit-identical to an uninterrupted
run, and a tampered checkpoint refuses the resume with a one-line ``TrainerConfigError`` (exit 2 in the CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from verl.checkpoint import CheckpointError, make_checkpointer
from verl.cli.ckpt import main as ckpt_main
from verl.config import TrainerConfigError, load_config

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
# lexical: no sentence-embedding model loaded by each run (see tests/verl/integration/exact_resume_chain.py)
ARGS = ["--config", "ppo_tiny", "trainer.total_steps=8", "checkpoint.interval=3", "metrics.prompt_analysis=lexical"]


def train(ckpt: Path, *overrides: str, resume: bool = False) -> subprocess.Popen[str]:
    # positional overrides must stay together for argparse, before the flags
    cmd = [sys.executable, "-m", "verl.cli.train", *ARGS, *overrides, "--checkpoint-dir", str(ckpt)]
    return subprocess.Popen(cmd + (["--resume"] if resume else []), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def digest(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert ckpt_main(["digest", str(ckpt)]) == 0
    return capsys.readouterr().out.strip()


@pytest.mark.slow
def test_sigkill_resume_is_exact_and_tampering_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # both first runs at once: two single-threaded trainers on two cores
    straight = train(tmp_path / "straight")
    # killed during step 7, while the step-6 save may still be in flight; step 3 is complete for sure
    killed = train(tmp_path / "killed", "faults.kill_trainer_at_step=7")
    out_straight, _ = straight.communicate(timeout=300)
    killed.communicate(timeout=300)
    assert straight.returncode == 0, out_straight[-2000:]
    assert killed.returncode == -9
    resumed = train(tmp_path / "killed", resume=True)
    out_resumed, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out_resumed[-2000:]
    assert "resumed from step" in out_resumed
    assert digest(tmp_path / "killed", capsys) == digest(tmp_path / "straight", capsys)
    assert digest(tmp_path / "killed", capsys).startswith("step=8 ")

    meta_path = tmp_path / "killed" / "global_step_8" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["format_version"] = 2
    meta_path.write_text(json.dumps(meta))
    hook = make_checkpointer(load_config("ppo_tiny", []), tmp_path / "killed", clock=None)
    trainer = SimpleNamespace(actor=None, critic=None, actor_optim=None, critic_optim=None)  # refused before use
    with pytest.raises(TrainerConfigError, match="mismatch") as info:
        hook.resume(trainer)
    assert isinstance(info.value, CheckpointError) and "global_step_8/meta.json" in str(info.value)
    assert "\n" not in str(info.value)
