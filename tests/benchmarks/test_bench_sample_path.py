"""benchmarks/sample_path.py: one sample scraped from a trainer's /metrics reaches the WeCom stand-in, and on
the scrape loop's thread alerting contributes only the transition log's rows and wake-up: no engine code,
no engine lock, no alerting.db transaction (the engine reads the log on its own thread); bad arguments are
one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sample_path.py"
# what the alert book's own write uses of alerting: the clock, its storage helpers, the rows and the log
ROWS_AND_HELPERS = {"alerting/clock.py", "alerting/durable.py", "alerting/evidence.py", "alerting/evidence_log.py",
                    "alerting/model.py", "alerting/translog.py"}


def test_one_sample_pages_and_the_scrape_loop_runs_no_engine_code(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--json"], capture_output=True, text=True, timeout=180,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    on_loop = {f.split(":")[0] for f in out["alerting_on_scrape_loop"]}
    assert on_loop <= ROWS_AND_HELPERS, sorted(on_loop - ROWS_AND_HELPERS)
    assert "alerting/translog.py:append" in out["alerting_on_scrape_loop"]  # the transition did cross here
    assert set(out["commits_on_scrape_loop"]) == {"monitor/book/alerts.py"}  # the book's state.db transaction only
    assert {"alerting-timers", "deliver-demo-wecom", "scrape-loop"} <= set(out["threads"])
    assert "alerting/engine.py" in out["module_list"]  # the engine did take it, on its own thread
    rows = out["evidence_row"]  # a refresh carries what is new, not the node's 11 histories again
    assert rows["whole"]["bytes"] > 11 * 4096 * 16 > 100 * rows["refresh"]["bytes"]


def test_a_bad_timeout_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--timeout", "0"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.strip().count("\n") == 0
