"""``verl-train --resume`` against hostile checkpoints and missing ones: nothing runs, nothing starts over.

A payload ``.metadata`` (re-hashed into the manifest and ``COMPLETE``) is refused before it is
unpickled; a structural edit is one line naming the part; ``--resume`` that finds no complete
checkpoint exits 2 unless ``--resume-or-start`` says a fresh start is fine.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verl.cli.train import main as train_main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ft"))
from hostile import edit_meta, plant_payload  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
ARGS = ["--config", "ppo_tiny", "trainer.total_steps=2", "checkpoint.interval=2", "metrics.layer_kl=false"]


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ckpt = tmp_path_factory.mktemp("ckpt") / "run"
    assert train_main([*ARGS, "--checkpoint-dir", str(ckpt)]) == 0
    assert (ckpt / "global_step_2" / "COMPLETE").exists()
    return ckpt


@pytest.fixture
def run(good_checkpoint: Path, tmp_path: Path) -> Path:
    shutil.copytree(good_checkpoint, tmp_path / "run")
    return tmp_path / "run"


def resume(ckpt: Path, capsys: pytest.CaptureFixture[str], flag: str = "--resume") -> tuple[int, str]:
    capsys.readouterr()
    code = train_main([*ARGS, "trainer.total_steps=3", "--checkpoint-dir", str(ckpt), flag])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    lines = [line for line in captured.err.splitlines() if line.strip()]
    return code, lines[0] if len(lines) == 1 else "\n".join(lines)


def test_payload_in_optimizer_metadata_is_refused_in_process(run: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    marker = tmp_path / "ran"
    plant_payload(run / "global_step_2", "optim/critic", marker)
    code, line = resume(run, capsys)
    assert code == 2 and "refused global_step_2/optim/critic/.metadata" in line, line
    assert not marker.exists() and "Traceback" not in caplog.text
    assert not (run / "global_step_3").exists()


@pytest.mark.slow
def test_payload_in_actor_metadata_never_runs_and_the_log_stays_clean(run: Path, tmp_path: Path) -> None:
    """As a user runs it: a separate process, its whole log read back."""
    marker = tmp_path / "ran"
    plant_payload(run / "global_step_2", "actor", marker)
    proc = subprocess.run([sys.executable, "-m", "verl.cli.train", *ARGS, "trainer.total_steps=3",
                           "--checkpoint-dir", str(run), "--resume"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    err_lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(err_lines) == 1 and "refused global_step_2/actor/.metadata" in err_lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda m: m["rng"][0].update(torch="AAAA"), "global_step_2/meta.json: rng[0].torch"),
    (lambda m: m["extra"].update(trainer={"x": 1}), "global_step_2/meta.json extra.trainer is malformed"),
    (lambda m: m["extra"].update(trainer=[]), "extra.trainer/extra.buffer are not mappings"),
])
def test_structural_edit_on_resume_is_one_line(run: Path, capsys: pytest.CaptureFixture[str], edit, needle: str) -> None:
    edit_meta(run / "global_step_2", edit)
    code, line = resume(run, capsys)
    assert code == 2 and needle in line, line


def test_resume_without_a_checkpoint_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, line = resume(tmp_path / "typo", capsys)
    assert code == 2 and "no complete checkpoint in" in line and "--resume-or-start" in line, line
    code, line = resume(tmp_path / "typo", capsys, flag="--resume-or-start")
    assert code == 0, line
    assert (tmp_path / "typo" / "global_step_3" / "COMPLETE").is_file()


def test_resume_with_markers_removed_exits_2_and_keeps_the_steps(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "global_step_2" / "COMPLETE").unlink()
    code, line = resume(run, capsys)
    assert code == 2 and "1 global_step_* dir(s) there lack the COMPLETE marker" in line, line
    assert (run / "global_step_2" / "meta.json").is_file()


def test_trainer_api_resume_is_strict_unless_resume_or_start(tmp_path: Path) -> None:
    """``RLTrainer.train(resume_from_checkpoint=True)`` itself refuses to start over (not only the CLI)."""
    from types import SimpleNamespace

    from verl.config import TrainerConfigError
    from verl.trainer.ppo_trainer import RLTrainer

    (tmp_path / "global_step_4").mkdir()  # a dir without its marker
    fake = SimpleNamespace(checkpointer=SimpleNamespace(resume=lambda trainer: None), checkpoint_dir=tmp_path)
    with pytest.raises(TrainerConfigError, match=r"no complete checkpoint in .*1 global_step_\* dir\(s\) there lack"):
        RLTrainer._resume(fake)
    RLTrainer._resume(fake, start_if_missing=True)  # a fresh start, logged
