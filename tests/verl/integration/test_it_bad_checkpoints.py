"""``verl-train --resume`` refuses a defective checkpoint with one line and exit code 2, never starting over:
a tampered ``format_version`` names the mismatch, a truncated shard names the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from verl.cli.train import main as train_main

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
ARGS = ["--config", "ppo_tiny", "trainer.total_steps=3", "checkpoint.interval=3", "metrics.layer_kl=false"]


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ckpt = tmp_path_factory.mktemp("ckpt") / "run"
    assert train_main([*ARGS, "--checkpoint-dir", str(ckpt)]) == 0
    assert (ckpt / "global_step_3" / "COMPLETE").exists()
    return ckpt


def resume(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = train_main([*ARGS, "trainer.total_steps=5", "--checkpoint-dir", str(ckpt), "--resume"])
    return code, capsys.readouterr().err


def test_tampered_format_version_exits_2_with_mismatch(good_checkpoint: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "run"
    shutil.copytree(good_checkpoint, ckpt)
    meta_path = ckpt / "global_step_3" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["format_version"] = 99
    meta_path.write_text(json.dumps(meta))
    code, err = resume(ckpt, capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "mismatch" in lines[0] and "Traceback" not in err, err
    assert not (ckpt / "global_step_5").exists()  # refused, not silently restarted


def test_truncated_shard_exits_2_naming_the_file(good_checkpoint: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "run"
    shutil.copytree(good_checkpoint, ckpt)
    shard = next((ckpt / "global_step_3" / "critic").glob("*.distcp"))
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    code, err = resume(ckpt, capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"global_step_3/critic/{shard.name}" in lines[0] and "Traceback" not in err, err
