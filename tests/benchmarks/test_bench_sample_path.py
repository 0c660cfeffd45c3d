"""benchmarks/sample_path.py: one sample scraped from a trainer's /metrics reaches the WeCom stand-in; the scrape
loop's thread runs no SQLite write and of alerting only the clock (evaluation, with the book's commit into the
transition log, has a thread of its own; the engine reads the log on its own thread); bad arguments are one line
and exit 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "sample_path.py"
TRAINER_SIDE = {"verl/fault/circuit_breaker.py"}  # counts the timeout in a trainer; here a bare counter does


def tour_modules() -> list[str]:
    """The modules README.md's tour says the sample crosses (its closing list)."""
    listed = re.search(r"The \d+ modules, by package: (.*?)\n\n", (ROOT / "README.md").read_text(encoding="utf-8"),
                       re.S)
    assert listed, "README.md: the tour's closing list is gone"
    return re.findall(r"`([\w/]+\.py)`", listed.group(1))


def test_one_sample_pages_and_the_scrape_loop_writes_nothing_and_runs_no_alerting_code(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--json"], capture_output=True, text=True, timeout=180,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert {f.split(":")[0] for f in out["alerting_on_scrape_loop"]} <= {"alerting/clock.py"}
    assert out["commits_on_scrape_loop"] == {}
    assert out["by_thread"]["scrape-loop"]["functions"] > 20  # it did scrape, parse and store the sample
    assert out["commits_by_thread"]["evaluation"] >= 1  # the book's state.db transaction, on its own thread
    assert "alerting/translog.py" in out["module_list"]  # the transition did cross into the log
    assert {"alerting-timers", "deliver-demo-wecom", "evaluation", "scrape-loop"} <= set(out["threads"])
    assert "alerting/engine.py" in out["module_list"]  # the engine did take it, on its own thread
    # the path the tour tells is the path that ran
    assert set(tour_modules()) - TRAINER_SIDE <= set(out["module_list"]), set(tour_modules()) - set(out["module_list"])
    rows = out["evidence_row"]  # a refresh carries what is new, not the node's 11 histories again
    assert rows["whole"]["bytes"] > 11 * 4096 * 16 > 100 * rows["refresh"]["bytes"]


def test_a_bad_timeout_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--timeout", "0"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.strip().count("\n") == 0
