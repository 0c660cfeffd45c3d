"""``verl-monitor run`` in the foreground: the daemon until SIGINT/SIGTERM, exit 2 with one line naming
the key and the fix when it cannot start (bad rules, an unwritable state_db, a taken port)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from alerting.config import AlertingConfigError
from alerting.logsafe import setup_logging
from monitor.config import MonitorConfig
from monitor.daemon import Daemon
from monitor.evaluation.rules import RuleError
from monitor.ha import set_aside_state

log = logging.getLogger("monitor.daemon")
SHUTDOWN_S = 4.5  # SIGTERM: a clean stop gets this long, then the process exits regardless
T = TypeVar("T")


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on uvloop where it is installed (a dependency on every platform it builds on).
    Why: at 1000 GPUs (250 targets every 5 s) the daemon cost 0.158-0.160 core on asyncio's own loop and
    0.128-0.133 on uvloop's (``benchmarks/monitor_scale.py --warmup 60 --duration 120``, runs alternated):
    the scrape loop's connects, socket reads, callbacks and timers are Python in asyncio's loop, C in uvloop's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def serve(config: MonitorConfig) -> int:
    """The daemon in the foreground until SIGINT/SIGTERM; 2 with one line when it cannot start."""
    setup_logging(logging.INFO)
    try:
        if config.replica:
            set_aside_state(config.state_db)
        daemon = Daemon(config)
    except RuleError as exc:
        print(f"verl-monitor: {exc}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error) as exc:
        print(f"verl-monitor: state_db {config.state_db}: cannot open ({exc}); {config.fix('state_db')} "
              "to a writable path", file=sys.stderr)
        return 2
    except AlertingConfigError as exc:  # already one line
        print(f"verl-monitor: notify_config {config.notify_config}: {exc}", file=sys.stderr)
        return 2
    try:
        daemon.api = daemon.listen()
    except OSError as exc:
        print(f"verl-monitor: cannot listen on {config.host}:{config.port} ({exc.strerror}); "
              f"{config.fix('listen')} to a free port", file=sys.stderr)
        daemon.close()
        return 2

    def on_signal() -> None:
        daemon.stop()
        # Whatever is running (a hanging Prometheus query in a worker thread, a receiver mid-request),
        # the process is gone within 5 s of SIGTERM; SQLite (WAL) and the outbox are crash-safe.
        timer = threading.Timer(SHUTDOWN_S, _forced_exit)
        timer.daemon = True
        timer.start()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        await daemon.run()

    run_event_loop(main())
    return 0


def _forced_exit() -> None:
    log.warning("shutdown took longer than %.1fs; exiting now (state is in SQLite, nothing is lost)", SHUTDOWN_S)
    logging.shutdown()
    os._exit(0)
