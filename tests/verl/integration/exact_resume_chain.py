"""The kill -9 chain of tests/verl/integration/test_it_exact_resume*.py (one file per rank count, so the
two chains run on two workers): a reference run, then a run SIGKILLed inside step 5, during the async
save of step 6 and from outside at step 7, resumed each time; both end with the same digest."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from verl.cli.ckpt import main as ckpt_main

ROOT = Path(__file__).resolve().parents[3]
NOUNS = ["sea", "moon", "city", "river", "forest", "snow", "book", "garden", "bridge", "storm"]
ASKS = ["Describe the {}.", "What sound does the {} make?", "Name a colour of the {}.", "Why visit the {}?"]


def prompts(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    rows = [{"prompt": f"Q: {ask.format(n)} A:"} for ask in ASKS for n in NOUNS]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def command(ranks: int, data: Path, ckpt: Path, *extra: str, resume: bool = False,
            resume_flag: str = "--resume") -> list[str]:
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
                if ranks > 1 else [sys.executable])
    # reward.deadline_multiplier=0: a reward call that a loaded machine delays past the deadline would give
    # one run cached scores at that step and the other not; bit-exactness needs the waiting breaker
    # metrics.prompt_analysis=lexical: every rank of every run otherwise loads the sentence-embedding model at
    # start-up (~1.2 CPU-s each, 30-odd rank starts in these files); the data-quality metrics are not part of
    # a checkpoint and tests/verl/test_semantic_data.py covers them
    overrides = ["trainer.total_steps=8", "checkpoint.interval=3", f"data.prompt_dataset={data}",
                 "data.cooldown_minutes=2", "rollout.prefetch_batches=2", "metrics.layer_kl=false",
                 "metrics.prompt_analysis=lexical", "reward.deadline_multiplier=0"]
    if ranks > 1:
        overrides += ["data.batch_size=8", "actor.ppo_mini_batch_size=4", "critic.ppo_mini_batch_size=4"]
    return [*launcher, "-m", "verl.cli.train", "--config", "ppo_tiny", *overrides, *extra,
            "--checkpoint-dir", str(ckpt), *([resume_flag] if resume else [])]


def start(cmd: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def kill_all(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the launcher and every rank: torchrun starts each rank in a session of its own, so killing
    the launcher's process group alone would leave the ranks behind."""
    try:
        ranks = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        ranks = []
    for p in [psutil.Process(proc.pid), *ranks] if proc.poll() is None else ranks:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def finish(proc: subprocess.Popen[str], timeout: float = 240) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_all(proc)
        out, _ = proc.communicate()  # a second call returns all of the output, also what the first had read
        pytest.fail(f"{' '.join(proc.args[:6])} ... did not finish in {timeout:.0f} s; its output:\n{out[-6000:]}")
    finally:
        kill_all(proc)  # nothing of a run may outlive it (a rank left in a collective would hang forever)
        proc.wait()
    return out


def kill_when(proc: subprocess.Popen[str], marker: str, act: Callable[[subprocess.Popen[str]], None] = kill_all
              ) -> str:
    """SIGKILL the whole run (or ``act`` on it) the moment ``marker`` shows up in its output (an arbitrary
    moment); its whole output once it ended."""
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            act(proc)
            break
    return "".join(seen) + finish(proc)


def digest(ckpt: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert ckpt_main(["digest", str(ckpt)]) == 0
    return capsys.readouterr().out.strip()


def run_chain(ranks: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = prompts(tmp_path)
    ref_dir, dir_ = tmp_path / "uninterrupted", tmp_path / "killed"
    reference = start(command(ranks, data, ref_dir))
    # 1: SIGKILL inside step 5 (after its rollout, before its update)
    first = start(command(ranks, data, dir_, "faults.kill_trainer_at_step=5"))
    out = finish(first)
    assert first.returncode != 0 and "step 5/8" not in out, out[-2000:]
    out_ref = finish(reference)
    assert reference.returncode == 0, out_ref[-3000:]

    # 2: SIGKILL while the async save of step 6 is still being written
    # --resume-or-start: on a loaded machine the kill at step 5 can land before step 3's async save commits,
    # and plain --resume then (rightly) refuses to start over
    second = start(command(ranks, data, dir_, "faults.kill_trainer_at_step=7", "faults.checkpoint_write_delay_s=3",
                           resume=True, resume_flag="--resume-or-start"))
    out = finish(second)
    assert second.returncode != 0 and "step 6/8" in out and "step 7/8" not in out, out[-3000:]
    assert "checkpoint global_step_6 complete" not in out  # staged, then killed while being written
    assert not (dir_ / "global_step_6" / "COMPLETE").exists()

    # 3: the incomplete step 6 is ignored; SIGKILL from outside as soon as step 7 is reported
    third = start(command(ranks, data, dir_, resume=True))
    out = kill_when(third, "step 7/8")
    assert "resumed from step 3" in out, out[-3000:]

    # 4: resume once more and finish
    last = start(command(ranks, data, dir_, resume=True))
    out = finish(last)
    assert last.returncode == 0, out[-3000:]
    assert "resumed from step" in out
    assert digest(dir_, capsys) == digest(ref_dir, capsys)
    assert digest(dir_, capsys).startswith("step=8 ")
    # the state that had to survive the kills was not trivial
    meta = json.loads((ref_dir / "global_step_8" / "meta.json").read_text())
    per_rank = meta["extra"]["trainer"]["per_rank"]
    assert len(per_rank) == ranks and all(r["dataloader"]["cooldown_skips"] > 0 for r in per_rank)
    assert sum(shard["rows"] for shard in meta["parts"]["rollout_cache"]["shards"]) > 0
