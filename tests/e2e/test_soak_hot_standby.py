"""The soak's ``--hot-standby`` mode against a stand-in supervisor that speaks ``verl-train --hot-standby``'s
lines: the soak SIGKILLs the announced active pid, restarts nothing, and charges the takeover to the kill."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.soak import Fault, Soak
from harness.soak_report import report
from harness.stack import Journal, Trainer

# A supervisor that keeps one trainer stand-in active: each prints steps (20/s) and saves its step every 5;
# when it dies the supervisor announces a new one, which logs its resume, as verl-train --hot-standby does.
SUPERVISOR = '''
import subprocess, sys
CHILD = """
import pathlib, sys, time
ckpt = pathlib.Path(sys.argv[1])
step = int(ckpt.read_text()) if ckpt.exists() else 0
if step:
    print(f"INFO verl.trainer: resumed from step {step}", flush=True)
while True:
    time.sleep(0.05)
    step += 1
    print(f"INFO verl.trainer: step {step}/1000000 | reward 0.1", flush=True)
    if step % 5 == 0:
        ckpt.write_text(str(step))
"""
while True:
    child = subprocess.Popen([sys.executable, "-u", "-c", CHILD, sys.argv[1]])
    print(f"hot-standby: active trainer pid {child.pid}", flush=True)
    child.wait()
'''


def wait_for(cond, timeout: float = 10.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_trainer_kill_hits_the_active_pid_and_the_takeover_is_the_restart(tmp_path: Path) -> None:
    (tmp_path / "fake_supervisor.py").write_text(SUPERVISOR)
    args = argparse.Namespace(duration=30, fault_interval=10, seed=0, correlation_window="20s", quiet=True,
                              hot_standby=True)
    soak = Soak(args, tmp_path / "work")
    journal = soak.stack.journal = Journal(echo=False)
    trainer = Trainer(journal, tmp_path / "trainer.log", [str(tmp_path / "ckpt")], env={"PYTHONPATH": str(tmp_path)},
                      hot_standby=True, module="fake_supervisor")
    try:
        assert trainer.wait_ready(10, "http://127.0.0.1:1/metrics") == "http://127.0.0.1:1/metrics"
        soak.trainers = [trainer]
        wait_for(lambda: len(trainer.actives) == 1 and len(trainer.step_times) >= 12)
        soak._sync_runs()
        assert soak._training()
        first_pid = trainer.actives[0].pid
        kill = Fault("trainer_kill", 1.0)
        soak.plan = [kill]
        soak._inject(kill)
        assert kill.target_pid == first_pid and soak.runs[0].killed_at is not None
        assert not soak._training()  # nothing more is injected until the new active process has stepped
        wait_for(lambda: len(trainer.actives) == 2 and len(trainer.actives[1].step_times) >= 10)
        soak._sync_runs()
        assert trainer.alive() and soak._training() and len(soak.trainers) == 1  # the soak restarted nothing
        assert trainer.actives[1].pid != first_pid and trainer.actives[1].resumed_from is not None
        soak.end_t = soak.wall = journal.now()
        out = report(soak)
    finally:
        trainer.stop()
    row = out["faults"][0]
    assert row["evidence"] == f"hot-standby: active trainer pid {trainer.actives[1].pid} took over"
    assert row["recovered"] and out["restarts"] == 1 and out["supervisor_restarts"] == 0
    # the new process resumed from the last save (every 5 steps): up to 5 steps (0.25 s) and the step in
    # flight are recomputed; the takeover (a fresh interpreter here) is the restart
    assert 0 < row["recomputed_s"] < 1.0 and row["restart_s"] > 0
    # each figure is rounded to 0.01 s on its own: the two rounded parts can exceed the rounded sum by 0.015
    assert row["lost_s"] >= row["restart_s"] + row["recomputed_s"] - 0.015 - 1e-9
    assert out["hot_standby"] is True


def test_rollout_worker_pids_are_the_pools_worker_processes() -> None:
    """What the soak's worker_kill SIGKILLs: the children of the trainer's forkserver (here: this process)."""
    import operator
    import os

    from harness.stack import rollout_worker_pids
    from verl.workers import RolloutWorkerPool

    with RolloutWorkerPool(operator.add, rollout_worker_num=2) as pool:
        wait_for(lambda: len(rollout_worker_pids(os.getpid())) == 2)
        found = rollout_worker_pids(os.getpid())
        assert pool.kill_worker(0) in found and pool.kill_worker(1) in found
    assert rollout_worker_pids(2**22 + 12345) == []  # no such process
