"""``verl-train --hot-standby``: a supervisor that keeps a warm standby trainer ready to take over.

    supervisor (this process; no torch)
      active   verl-train ... --resume-or-start            training, serving /metrics
      standby  verl-train ... --resume-or-start --standby   imports done, models and rollout workers
                                                            built, waiting on its stdin

When the active process dies abnormally (a signal such as SIGKILL, or exit code 1), the supervisor writes
one line to the standby's stdin; the standby binds the metrics port, resumes from the newest checkpoint
(the in-memory tier's snapshot of the last step when ``checkpoint.memory_interval`` is on, else disk) and
trains on. A new standby is started once the new active process has logged its first step, so its start-up
never competes with a resume. What a cold restart pays -- interpreter, torch (and transformers) imports,
model build, worker start -- the standby paid while the old process was still training.

Exit codes 0 (finished), 2 (bad input), 3 (stopped on purpose) and 130 (interrupted) end the run: the
standby is dismissed (its stdin closed) and the supervisor exits with that code. SIGTERM/SIGINT to the
supervisor are passed to the active process. Each activation is announced on stdout as
``hot-standby: active trainer pid <PID>`` (harnesses kill that PID to inject a trainer crash).

Limitations: single node (one active process, not a torchrun job); the standby holds a second copy of the
models in memory; a ``faults.kill_trainer_at_step`` fault fires again in a standby that resumes before
that step (kill the active PID from outside instead).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

FINAL_CODES = {0, 2, 3, 130}
STANDBY_FLAG = "--standby"
# A standby warms up (three processes importing torch: itself, its forkserver, its rollout workers) at this
# niceness, so the active trainer keeps the CPU; on takeover it restores the supervisor's. Measured on the
# 2-core soak: at nice 0 the warm-up slowed the new active trainer's steps for ~10 s after a takeover.
STANDBY_NICE = 10
RESTORE_NICE_ENV = "VERL_STANDBY_RESTORE_NICE"
STEP_MARK = "verl.trainer: step "
RESPAWN_BACKOFF_S = 2.0


@dataclass
class Child:
    proc: subprocess.Popen[str]
    stepped: threading.Event = field(default_factory=threading.Event)


class HotStandbySupervisor:
    def __init__(self, argv: list[str]) -> None:
        self.argv = [a for a in argv if a not in ("--hot-standby", "--resume", "--resume-or-start")]
        self.first_resume = [a for a in argv if a in ("--resume", "--resume-or-start")]
        self._lock = threading.Lock()
        self._stop_signal: int | None = None

    def _spawn(self, role: str, resume: list[str]) -> Child:
        standby = role == "standby"
        cmd = [sys.executable, "-m", "verl.cli.train", *self.argv, *resume, *([STANDBY_FLAG] if standby else [])]
        env = {**os.environ, RESTORE_NICE_ENV: str(os.nice(0))} if standby else None
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if standby else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env,
                                preexec_fn=(lambda: os.nice(STANDBY_NICE)) if standby else None)  # noqa: PLW1509
        child = Child(proc)
        threading.Thread(target=self._relay, args=(child,), daemon=True).start()
        return child

    def _relay(self, child: Child) -> None:
        """Pass the child's output through line by line, and notice its first training step."""
        assert child.proc.stdout is not None
        for line in child.proc.stdout:
            if STEP_MARK in line:
                child.stepped.set()
            with self._lock:
                sys.stdout.write(line)
                sys.stdout.flush()

    def _say(self, text: str) -> None:
        with self._lock:
            print(f"hot-standby: {text}", flush=True)

    def _forward(self, signum: int, _frame: object) -> None:
        self._stop_signal = signum

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._forward)
        signal.signal(signal.SIGINT, self._forward)
        active = self._spawn("active", self.first_resume)
        self._say(f"active trainer pid {active.proc.pid}")
        standby: Child | None = None
        next_spawn = 0.0
        try:
            while True:
                if self._stop_signal is not None:
                    active.proc.send_signal(signal.SIGTERM if self._stop_signal == signal.SIGTERM else signal.SIGINT)
                    return active.proc.wait()
                code = active.proc.poll()
                if code is not None:
                    if code in FINAL_CODES:
                        return code
                    if standby is None or standby.proc.poll() is not None:
                        self._say(f"trainer pid {active.proc.pid} died ({_how(code)}); no standby ready: cold restart")
                        active = self._spawn("active", ["--resume-or-start"])
                    else:
                        self._say(f"trainer pid {active.proc.pid} died ({_how(code)}); standby pid "
                                  f"{standby.proc.pid} takes over")
                        assert standby.proc.stdin is not None
                        standby.proc.stdin.write("go\n")
                        standby.proc.stdin.flush()
                        active, standby = standby, None
                    self._say(f"active trainer pid {active.proc.pid}")
                    next_spawn = 0.0
                if standby is not None and standby.proc.poll() is not None:
                    self._say(f"standby pid {standby.proc.pid} exited ({_how(standby.proc.returncode)}); "
                              f"starting another in {RESPAWN_BACKOFF_S:.0f}s")
                    standby, next_spawn = None, time.monotonic() + RESPAWN_BACKOFF_S
                if standby is None and active.stepped.is_set() and time.monotonic() >= next_spawn:
                    standby = self._spawn("standby", ["--resume-or-start"])
                    self._say(f"standby pid {standby.proc.pid} warming up")
                time.sleep(0.02)
        finally:
            if standby is not None and standby.proc.poll() is None:
                _dismiss(standby)
            if active.proc.poll() is None:
                active.proc.terminate()
                active.proc.wait(10)


def _how(code: int) -> str:
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


def _dismiss(child: Child) -> None:
    """Close the standby's stdin (it exits on EOF); terminate it if it does not."""
    try:
        if child.proc.stdin is not None:
            child.proc.stdin.close()
        child.proc.wait(5)
    except (OSError, subprocess.TimeoutExpired):
        child.proc.kill()
        child.proc.wait()


def wait_for_takeover() -> bool:
    """In a standby: block until the supervisor says go (True) or goes away (False: stdin closed). On go,
    this process and its rollout workers get the supervisor's niceness back."""
    print(f"hot-standby: standby pid {os.getpid()} ready", flush=True)
    if not sys.stdin.readline():
        return False
    _restore_priority()
    return True


def _restore_priority() -> None:
    import psutil

    try:
        want = int(os.environ.get(RESTORE_NICE_ENV, ""))
    except ValueError:
        return
    me = psutil.Process()
    try:
        for proc in [me, *me.children(recursive=True)]:
            proc.nice(want)
    except psutil.AccessDenied:
        print(f"hot-standby: cannot restore niceness {want} (needs CAP_SYS_NICE): this trainer runs at nice "
              f"{me.nice()}", flush=True)
    except psutil.NoSuchProcess:
        pass
