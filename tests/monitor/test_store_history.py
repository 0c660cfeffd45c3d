"""A series' ring is sized by what reads it (monitor/evaluation/history.py, monitor/book/evidence.py): a series a plotting rule
binds holds the rule's window and the plot's context, one nothing reads (no plot, no diagnosis: a
non-plotting rule's detector keeps its own window) a short history, a reader that needs more later grows it
from then on, and the diagnosis reads no more of the short evidence series."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from alerting.clock import SimulatedClock
from alerting.evidence import Evidence, SeriesWindow
from alerting.findings import Case
from alerting.model import Alert
from alerting.procedures import EVIDENCE_SERIES, PROCEDURES
from monitor.book.evidence import NEWEST_ONLY
from monitor.detectors import registry
from monitor.evaluation import history
from monitor.evaluation.rules import load_rule_files, load_rules
from monitor.pipeline import Pipeline
from monitor.series.store import UNREAD_HISTORY, Series, SeriesStore, StoreLimits, series_key

T0 = 1_767_225_600.0


def feed(pipe: Pipeline, name: str, labels: dict[str, str], times: np.ndarray) -> Series:
    series = pipe.series(name, labels, "t")
    assert series is not None
    for i, t in enumerate(times.tolist()):
        pipe.observe(series, t, 1e9 + float(i % 7), "t")
    return series


def test_every_detector_type_has_a_history() -> None:
    kinds = [*history.SECONDS, *history.SAMPLES, *history.INSTANT]
    assert sorted(kinds) == sorted(registry.DETECTORS)  # each once: a new detector must say what it reads
    for kind, params in {**history.SECONDS, **history.SAMPLES}.items():
        assert set(params) <= registry.accepted_params(kind), kind


def test_a_bound_series_holds_its_rules_window_and_an_unread_one_a_short_history() -> None:
    pipe = Pipeline(load_rule_files(None), SimulatedClock(T0))
    times = T0 + 5.0 * np.arange(1440)  # 2 h at 5 s
    node = {"node": "gpu-000", "gpu": "0"}
    leak = feed(pipe, "DCGM_FI_DEV_FB_USED", node, times)  # MemoryLeakSuspected: 30 min window, plot: true
    nvlink = feed(pipe, "verl_gpu_nvlink_errors_total", {**node, "link": "0"}, times)  # counter_increase 10 min
    clock = feed(pipe, "DCGM_FI_DEV_SM_CLOCK", node, times)  # no rule, no plot, no diagnosis
    kl = feed(pipe, "verl_kl_coef", {"node": "gpu-000"}, times)  # diagnosis evidence, but no engine diagnoses
    t, _ = leak.window()
    assert t[-1] - t[0] >= 2 * 1800  # the plot: the 30-min window and as much before it
    # its rule (counter_increase, 10 min) does not plot, and its detector keeps its own window: nothing reads
    # more than the short history
    assert nvlink.capacity == UNREAD_HISTORY and len(nvlink) == UNREAD_HISTORY
    assert len(clock) == UNREAD_HISTORY and clock.interval() == 5.0
    assert kl.capacity == UNREAD_HISTORY  # a monitor without an engine reads no evidence
    assert leak.capacity < StoreLimits().capacity  # 900 samples, not 4096


class Follower:
    """An engine as the pipeline sees it: it follows the alert book's log (and reads nothing here)."""

    def follow(self, log: Any) -> None:
        pass


def test_with_an_engine_the_diagnosis_evidence_keeps_the_whole_ring(tmp_path: Path) -> None:
    pipe = Pipeline(load_rule_files(None), SimulatedClock(T0), db_path=str(tmp_path / "state.db"), engine=Follower())
    times = T0 + 5.0 * np.arange(1440)
    kl = feed(pipe, "verl_kl_coef", {"node": "gpu-000"}, times)  # held_since reads it all
    stage = feed(pipe, "verl_stage_seconds", {"node": "gpu-000", "stage": "rollout"}, times)
    clock = feed(pipe, "DCGM_FI_DEV_SM_CLOCK", {"node": "gpu-000", "gpu": "0"}, times)
    assert len(kl) == len(stage) == len(times) and kl.capacity == StoreLimits().capacity
    assert clock.capacity == UNREAD_HISTORY
    pipe.close()


def test_a_reader_that_needs_more_later_grows_the_ring_from_then_on(tmp_path: Path) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n  - alert: X\n    severity: P3\n    select: m\n    plot: true\n"
                     "    detector: {type: counter_increase, window: 10m, min_increase: 1}\n")
    pipe = Pipeline(load_rules(rules), SimulatedClock(T0))
    slow = T0 + 600.0 * np.arange(30)  # one per 10 min: the plot's hour holds 8 samples, the short ring suffices
    series = feed(pipe, "m", {}, slow)
    assert series.capacity == UNREAD_HISTORY and len(series) == UNREAD_HISTORY  # it wrapped
    fast = slow[-1] + 5.0 * np.arange(1, 401)  # then every 5 s: the plot's hour is 720 samples
    for i, t in enumerate(fast.tolist()):
        pipe.observe(series, t, float(i), "t")
    t, v = series.window()
    assert series.capacity >= 150 and t[-1] - t[0] >= 600
    assert np.all(np.diff(t) > 0) and list(v[-3:]) == [397.0, 398.0, 399.0]


def test_series_reserve_after_the_ring_wrapped_keeps_order() -> None:
    s = Series("x", {}, 8, 0)
    for i in range(20):
        s.append(float(i), float(i))
    s.reserve(32)
    s.reserve(4)  # never less
    for i in range(20, 30):
        s.append(float(i), float(i))
    t, v = s.window()
    assert list(t) == [float(i) for i in range(12, 30)] and list(v) == list(t) and s.capacity == 32


def test_labels_come_back_from_the_key() -> None:
    s = Series("m", {"b": "2", "a": "1"}, 4, 0)
    assert s.labels == {"a": "1", "b": "2"} and s.key == ("m", ("a", "1", "b", "2"))
    s.labels["c"] = "3"  # a copy: the series' identity cannot change through it
    assert s.labels == {"a": "1", "b": "2"}


class Recording:
    """An evidence reader that notes which question was asked about which series."""

    def __init__(self, evidence: Evidence) -> None:
        self.evidence = evidence
        self.asked: set[tuple[str, str]] = set()

    def __getattr__(self, method: str) -> Any:
        inner = getattr(self.evidence, method)

        def ask(*args: Any, **kwargs: Any) -> Any:
            if args:
                self.asked.add((method, str(args[0])))
            return inner(*args, **kwargs)
        return ask


def evidence(pattern: str, now: float, with_verl_gpu: bool) -> Evidence:
    t = now - 7200 + 30.0 * np.arange(240)
    shapes = {"flat": np.full(t.size, 5.0), "rising": np.linspace(1.0, 500.0, t.size),
              "drop": np.where(t < now - 1200, 0.8, 0.0), "jump": np.where(t < now - 1200, 0.02, 0.4)}
    windows = []
    for name in sorted(EVIDENCE_SERIES):
        if name.startswith("verl_gpu") and not with_verl_gpu:
            continue
        labels = {"node": "gpu-01", "gpu": "0", "stage": "train" if "buffer" in name else "dataloader"}
        windows.append(SeriesWindow(name, labels, t, shapes[pattern]))
    return Evidence(now, tuple(windows))


@pytest.mark.parametrize("pattern", ["flat", "rising", "drop", "jump"])
@pytest.mark.parametrize("with_verl_gpu", [True, False])
def test_the_diagnosis_reads_only_the_newest_sample_of_the_short_evidence_series(pattern: str,
                                                                                 with_verl_gpu: bool) -> None:
    now = T0 + 7200
    asked: set[tuple[str, str]] = set()
    for proc in PROCEDURES.values():
        members = [Alert({"alertname": a, "severity": "P2", "cluster": "c", "node": "gpu-01", "gpu": "0"},
                         starts_at=now - 900, value=2e7) for a in sorted(proc.triggers)]
        for config in ({}, {"rollout_buffer_max_size": "-1", "kl_coef": "0.0"}):
            reader = Recording(evidence(pattern, now, with_verl_gpu))
            proc.run(Case(members, dict(config), reader))  # type: ignore[arg-type]
            asked |= reader.asked
    short = {(m, n) for m, n in asked if n in NEWEST_ONLY}
    assert short and {m for m, _ in short} <= {"latest", "readings"}, short


def test_series_with_the_same_labels_share_one_labels_tuple() -> None:
    store = SeriesStore(StoreLimits(max_series=100))
    gpu = {"gpu": "0", "UUID": "GPU-0000", "Hostname": "n1"}
    util, temp = store.get_or_create("util", dict(gpu)), store.get_or_create("temp", dict(gpu))
    other = store.get_or_create("util", {**gpu, "gpu": "1"})
    assert util is not None and temp is not None and other is not None
    assert util.key[1] is temp.key[1] and util.key[1] != other.key[1]
    assert store.get(series_key("temp", dict(gpu))) is temp and temp.labels == gpu
    for i in range(200):  # label sets that came and went are not kept: the table follows the live series
        s = store.get_or_create("churn", {"pod": str(i)}, "churner")
        assert s is not None
        store.remove_source("churner")
    assert len(store._label_sets) <= 2 * len(store) + 64

