"""benchmarks/suite_cpu.py: the plugin counts a test's own CPU and its reaped children's, and the summary
ranks files by CPU; bad input is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.suite_cpu import main, summarise, timeline

ROOT = Path(__file__).resolve().parents[2]
BUSY_CHILD = """
import subprocess, sys


def test_spends_in_a_child():
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)


def test_idles():
    pass
"""


def test_the_plugin_counts_a_reaped_child_and_the_summary_ranks_files(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "test_busy.py").write_text(BUSY_CHILD)
    profile = tmp_path / "cpu.jsonl"
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "benchmarks.suite_cpu", "-p", "no:cacheprovider",
                          str(tmp_path / "test_busy.py")], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**{k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"},  # ours under xdist
                              "CPU_PROFILE": str(profile), "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {r["id"].split("::")[1]: r for r in map(json.loads, profile.read_text().splitlines())}
    assert rows["test_spends_in_a_child"]["children"] > 0.05 > rows["test_idles"]["children"]
    assert main([str(profile), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["tests"] == 2 and summary["files"][0]["children_s"] >= 0.1
    spans = timeline([json.loads(line) for line in profile.read_text().splitlines()])
    assert [(s["worker"], s["file"], s["start_s"]) for s in spans] == [("main", "test_busy.py", 0.0)]
    # the span is rounded to 0.1 s (the epoch clock), the test's wall to 1 ms (the monotonic one)
    assert spans[0]["end_s"] >= rows["test_spends_in_a_child"]["wall"] - 0.1


def test_timeline_places_each_file_per_worker_in_start_order() -> None:
    rows = [{"id": "b.py::t1", "worker": "gw1", "start": 105.0, "end": 110.0},
            {"id": "a.py::t1", "worker": "gw0", "start": 100.0, "end": 101.0},
            {"id": "a.py::t2", "worker": "gw0", "start": 101.0, "end": 130.0},
            {"id": "c.py::t1", "self": 0.1, "children": 0.0, "wall": 1.0}]  # an older profile's row: no times
    assert timeline(rows) == [
        {"worker": "gw0", "file": "a.py", "start_s": 0.0, "end_s": 30.0, "span_s": 30.0},
        {"worker": "gw1", "file": "b.py", "start_s": 5.0, "end_s": 10.0, "span_s": 5.0}]


def test_summary_ranks_by_cpu_and_bad_input_is_one_line_exit_2(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"id": "a.py::t1", "self": 1.0, "children": 0.0, "wall": 5.0},
            {"id": "b.py::t1", "self": 0.5, "children": 3.0, "wall": 9.0},
            {"id": "a.py::t2", "self": 1.0, "children": 0.0, "wall": 1.0}]
    assert [f["file"] for f in summarise(rows)["files"]] == ["b.py", "a.py"]
    assert summarise(rows)["cpu_s"] == 5.5
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"no": "id"}\n')
    assert main([str(bad)]) == 2 and main([str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not this plugin's output" in err[0] and "no such file" in err[1]
