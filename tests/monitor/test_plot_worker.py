"""Alert plots render in a child process: the same PNG as in process, matplotlib never loaded in the
monitor, a child that does not answer killed after its timeout, and an idle child gone."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from monitor.book.plot_worker import PlotWorker
from monitor.book.plots import fit_png

T0 = 1_767_225_600.0


def _series() -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    t = T0 + np.arange(0.0, 3600.0, 5.0)
    v = np.sin(t / 300.0) + (t - T0) * 1e-4
    return t, v, {"slope_per_min": 0.006, "intercept": 0.2, "t_ref": float(t[200]), "p_value": 1e-6,
                  "window_start": float(t[200]), "onset": float(t[500])}


def test_the_child_renders_the_in_process_png_and_the_parent_never_imports_matplotlib(tmp_path: Path) -> None:
    code = ("import sys, pickle, numpy as np; from monitor.book.plot_worker import PlotWorker; "
            "t, v, d = pickle.load(open(sys.argv[1], 'rb')); w = PlotWorker(); "
            "png = w.render(t, v, d, 'KLDriftDetected kl node=gpu-1', 'verl_kl'); w.close(); "
            "open(sys.argv[2], 'wb').write(png); print('matplotlib' in sys.modules, w.children_started, w.failures)")

    (tmp_path / "job.pkl").write_bytes(pickle.dumps(_series()))
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "job.pkl"), str(tmp_path / "child.png")],
                         capture_output=True, text=True, check=True, timeout=120).stdout.split()
    assert out == ["False", "1", "0"]
    t, v, d = _series()
    assert (tmp_path / "child.png").read_bytes() == fit_png(t, v, d, "KLDriftDetected kl node=gpu-1", "verl_kl")


def test_a_child_that_does_not_answer_in_time_is_killed_and_the_next_plot_gets_a_fresh_one() -> None:
    t, v, d = _series()
    worker = PlotWorker(timeout_s=0.001)  # no child starts and imports matplotlib within a millisecond
    try:
        assert worker.render(t, v, d, "slow") is None
        assert worker.failures == 1 and worker._proc is None  # killed, not left running
        worker.timeout_s = 60.0
        png = worker.render(t, v, d, "slow")
        assert png is not None and png.startswith(b"\x89PNG")
        assert worker.children_started == 2 and worker.failures == 1
    finally:
        worker.close()


def test_an_idle_child_exits_and_a_render_error_costs_only_that_plot() -> None:
    t, v, d = _series()
    worker = PlotWorker(idle_s=0.3)
    try:
        assert worker.render(t, v, d, "one") is not None
        proc = worker._proc
        assert proc is not None
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() == 0  # gone on its own once idle: no matplotlib left resident anywhere
        assert worker.render(t, v, dict(d, slope_per_min="x"), "bad") is None  # type: ignore[arg-type]
        assert worker.failures == 1 and worker.children_started == 2
        assert worker.render(t, v, d, "after") is not None  # the same child goes on
        assert worker.children_started == 2
    finally:
        worker.close()
    assert worker._proc is None


def test_the_annotate_stage_writes_the_childs_png_at_the_alerts_path(tmp_path: Path) -> None:
    from monitor.book.annotate import _render_quietly

    t, v, d = _series()
    worker = PlotWorker()
    try:
        path = _render_quietly(tmp_path / "p.png", t, v, d, "title", "KLDriftDetected", "verl_kl", worker)
        assert path == tmp_path / "p.png"
        assert path.read_bytes() == fit_png(t, v, d, "title", "verl_kl")
    finally:
        worker.close()
    assert _render_quietly(tmp_path / "c.png", t, v, d, "title", "KLDriftDetected", "verl_kl", worker) is None
    assert worker.children_started == 1  # closed: no child starts again
    silent = PlotWorker(timeout_s=0.0)  # a child that cannot answer in 0 s: the alert goes on without its PNG
    try:
        assert _render_quietly(tmp_path / "q.png", t, v, d, "title", "KLDriftDetected", "verl_kl", silent) is None
        assert not (tmp_path / "q.png").exists() and not (tmp_path / "q.png.part").exists()
        assert silent.failures == 1
    finally:
        silent.close()


def test_closing_does_not_wait_for_a_render_in_flight() -> None:
    t, v, d = _series()
    worker = PlotWorker(timeout_s=120.0)
    got: list[bytes | None] = []
    thread = threading.Thread(target=lambda: got.append(worker.render(t, v, d, "in flight")))
    thread.start()
    while worker._proc is None and thread.is_alive():  # the render holds the worker, its child starting
        time.sleep(0.01)
    started = time.monotonic()
    worker.close()
    thread.join(timeout=30)
    assert not thread.is_alive() and time.monotonic() - started < 15
    assert got in ([None], [fit_png(t, v, d, "in flight")])  # killed mid-start, or done within close's second
    assert worker._proc is None or worker._proc.poll() is not None


def test_the_child_exits_when_the_monitor_is_gone() -> None:
    t, v, d = _series()
    worker = PlotWorker(idle_s=600.0)
    try:
        assert worker.render(t, v, d, "one") is not None
        proc, jobs = worker._proc, worker._jobs_conn
        assert proc is not None and jobs is not None
        jobs.close()  # what the monitor's exit (kill -9 included) does to the child's end of the pipe
        assert proc.wait(timeout=30) == 0  # not left waiting out its 10-min idle time
    finally:
        worker._jobs_conn = None
        worker.close()
