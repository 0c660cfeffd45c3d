"""A real local Ray cluster for tests/monitor/test_ray_live.py, in its own process, bound to loopback.

Started with ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (Ray's single-machine mode: every component on
127.0.0.1) and the environment the test gives it (``RAY_AUTH_TOKEN``, the memory monitor's threshold).
Answers on the pipe ``RAY_DRIVER_ANSWER_FD`` names (Ray's own components write to stdout): one JSON line
``{"dashboard_url": ..., "temp_dir": ...}``, then obeys one command per stdin line:

- ``exit``: a ``RolloutWorker`` actor calls ``sys.exit(3)``;
- ``oom``: a ``RolloutWorker`` allocates 64 MB every 50 ms until Ray's memory monitor kills it (a real
  OOM kill by Ray; the threshold is set just above the machine's use when the test starts);
- ``sigkill``: a ``RolloutWorker`` is sent SIGKILL -- the signal the kernel OOM killer sends (the kernel
  itself is not driven out of memory on a shared machine);

answering ``done <command> <pid> <how the call ended>`` (``returned`` or the exception's class name, e.g.
``OutOfMemoryError``: a test that finds no death can tell Ray's not killing from the monitor's not paging);
stdin closed: ``ray.shutdown()``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import ray


@ray.remote(max_restarts=0, num_cpus=0)
class RolloutWorker:
    def pid(self) -> int:
        return os.getpid()

    def exit(self) -> None:
        sys.exit(3)

    def hog(self) -> None:
        blocks = []
        while True:
            blocks.append(bytearray(64 * 1024 * 1024))
            time.sleep(0.05)


def main() -> None:
    temp_dir = sys.argv[1]
    answers = os.fdopen(int(os.environ["RAY_DRIVER_ANSWER_FD"]), "w", buffering=1)
    ctx = ray.init(num_cpus=1, include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=0,
                   _temp_dir=temp_dir, log_to_driver=False, configure_logging=False)
    print(json.dumps({"dashboard_url": "http://" + ctx.dashboard_url, "temp_dir": temp_dir}), file=answers, flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        worker = RolloutWorker.remote()
        pid = ray.get(worker.pid.remote(), timeout=120)
        ended = "returned"
        try:
            if cmd == "exit":
                ray.get(worker.exit.remote())
            elif cmd == "oom":
                ray.get(worker.hog.remote(), timeout=120)
            elif cmd == "sigkill":
                os.kill(pid, signal.SIGKILL)
                time.sleep(1.0)
        except Exception as exc:  # noqa: BLE001 - the death is the point
            ended = type(exc).__name__
            print(f"# {cmd}: {ended}: {str(exc)[:600]}", file=sys.stderr, flush=True)
        print(f"done {cmd} {pid} {ended}", file=answers, flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
