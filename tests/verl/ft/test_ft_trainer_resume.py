"""The checkpoint hook inside the real trainer: SIGKILL + resume ends bit-identical to an uninterrupted
run, and a tampered checkpoint stops ``verl-train --resume`` with one line and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verl.cli.ckpt import main as ckpt_main

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
ARGS = ["--config", "ppo_tiny", "trainer.total_steps=8", "checkpoint.interval=3"]


def train(ckpt: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    overrides = [e for e in extra if not e.startswith("--")]  # positionals must stay together for argparse
    flags = [e for e in extra if e.startswith("--")]
    return subprocess.run(
        [sys.executable, "-m", "verl.cli.train", *ARGS, *overrides, "--checkpoint-dir", str(ckpt), *flags],
        capture_output=True, text=True, timeout=300,
    )


def digest(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert ckpt_main(["digest", str(ckpt)]) == 0
    return capsys.readouterr().out.strip()


@pytest.mark.slow
def test_sigkill_resume_is_exact_and_tampering_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    straight = train(tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr[-2000:]

    # killed during step 7, while the step-6 save may still be in flight; step 3 is complete for sure
    killed = train(tmp_path / "killed", "faults.kill_trainer_at_step=7")
    assert killed.returncode == -9
    resumed = train(tmp_path / "killed", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from step" in resumed.stdout + resumed.stderr
    assert digest(tmp_path / "killed", capsys) == digest(tmp_path / "straight", capsys)
    assert digest(tmp_path / "killed", capsys).startswith("step=8 ")

    meta_path = tmp_path / "killed" / "global_step_8" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["format_version"] = 2
    meta_path.write_text(json.dumps(meta))
    refused = train(tmp_path / "killed", "--resume")
    assert refused.returncode == 2
    errors = [line for line in refused.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "mismatch" in errors[0] and "global_step_8/meta.json" in errors[0]
    assert "Traceback" not in refused.stderr
