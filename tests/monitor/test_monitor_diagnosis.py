"""Each decision procedure on its own (alerting/procedures.py) over the evidence the monitor captures
(monitor/book/evidence.py) for the alerts' nodes: the positive case names the cause with live values and sources, the "must not
claim" negatives name nothing unmeasured, and missing evidence is said to be missing."""

from __future__ import annotations

import numpy as np
import pytest

from alerting.clock import SimulatedClock
from alerting.evidence import Evidence
from alerting.findings import Case
from alerting.model import Alert
from alerting.procedures import data_loading, diagnose, kl_coef, memory_growth, reward_model, rollout_backlog
from alerting.sink import diagnosis_needs
from monitor.book.evidence import EvidenceCapture
from monitor.series.store import SeriesStore
from tests.monitor.recording_sink import RecordingSink

T0 = 1_767_225_600.0
NODE = "gpu-01"


class World:
    """A series store and clock to write series into, and the capture of what the procedures read."""

    def __init__(self, now: float = T0 + 3600) -> None:
        self.store = SeriesStore()
        self.clock = SimulatedClock(now)
        self.ev = EvidenceCapture(self.store, None, diagnosis_needs().series_read)

    def put(self, name: str, t: np.ndarray, v: np.ndarray, **labels: str) -> None:
        s = self.store.get_or_create(name, {"node": NODE, **labels})
        assert s is not None
        for ti, vi in zip(t.tolist(), v.tolist(), strict=True):
            if vi == vi:
                s.append(ti, vi)
            else:
                self.ev.nonfinite_log.add(s, ti)

    def case(self, *alerts: Alert, **config: str) -> Case:
        nodes = {a.labels["node"] for a in alerts}  # as the pipeline captures: the firing alerts' nodes
        return Case(list(alerts), dict(config), self.ev.capture(self.clock.now(), nodes))


def alert(name: str, starts: float, value: float | None = None, **labels: str) -> Alert:
    return Alert({"alertname": name, "severity": "P2", "cluster": "c", "node": NODE, **labels},
                 starts_at=starts, value=value)


def grid(step: float = 30.0, minutes: float = 60.0) -> np.ndarray:
    return T0 + np.arange(0.0, minutes * 60, step)


def test_reward_model_positive_names_loading_with_levels() -> None:
    w, t = World(), grid()
    w.put("verl_reward_mean", t, np.where(t >= T0 + 2400, 0.002, 0.8))
    f = reward_model(w.case(alert("RewardDistributionDrift", T0 + 2460)))
    assert f is not None and f.cause
    assert "reward mean is 0.002 (verl_reward_mean, was 0.8 before" in f.root_cause[0]
    assert "load_reward_model(reward.path).score([...])" in f.suggestion[0]


def test_reward_model_nan_counts_samples_and_skipped_steps() -> None:
    w, t = World(), grid()
    w.put("verl_reward_mean", t, np.where(t >= T0 + 2400, np.nan, 0.8))
    w.put("verl_nonfinite_steps_total", t, np.where(t >= T0 + 2400, (t - T0 - 2400) // 30 + 1, 0))
    f = reward_model(w.case(alert("NonFiniteGradients", T0 + 2400), **{"reward_path": "/models/rm"}))
    assert f is not None and f.cause and "reward mean is NaN/Inf (40 sample(s)" in f.root_cause[0]
    assert "40 step(s) skipped as non-finite (verl_nonfinite_steps_total)" in f.root_cause[0]
    assert "reward.path = /models/rm (verl_config_info)" in f.suggestion[0]


def test_reward_model_must_not_claim_with_healthy_rewards() -> None:
    """The demo's case: RewardVarianceSpike with a healthy reward mean is not the reward model."""
    w, t = World(), grid()
    w.put("verl_reward_mean", t, np.full(len(t), 0.8))
    f = reward_model(w.case(alert("RewardVarianceSpike", T0 + 3000)))
    assert f is not None and not f.cause and not f.root_cause
    assert "reward mean 0.8" in f.checked[0] and "not near 0" in f.checked[0]


def test_reward_model_missing_evidence_is_said() -> None:
    f = reward_model(Case([alert("RewardVarianceSpike", T0)], {}, Evidence(T0)))
    assert f is not None and not f.cause and f.missing == ["reward mean not measured (no verl_reward_mean samples)"]


def test_kl_coef_positive_quotes_live_value_step_and_config() -> None:
    w, t = World(), grid()
    w.put("verl_global_step", t, 1000 + (t - T0) // 30)
    w.put("verl_kl_coef", t, np.where(t >= T0 + 1800, 0.0, 0.2))
    w.put("verl_kl_divergence", t, np.where(t >= T0 + 1800, 0.02 + (t - T0 - 1800) / 1800 * 0.05, 0.02))
    f = kl_coef(w.case(alert("KLDriftDetected", T0 + 3000), kl_coef="0.2"))
    assert f is not None and f.cause
    assert f.root_cause[0].startswith("kl_coef = 0.0 since step 1060 (verl_kl_coef; config says 0.2)")
    assert "rose 0.02 -> 0.069" in f.root_cause[0]
    assert f.suggestion[0].startswith("Set kl_coef back to 0.2 (live 0.0, expected 0.1-0.5)")


def test_kl_coef_out_of_range_is_a_cause_too() -> None:
    w, t = World(), grid()
    w.put("verl_kl_coef", t, np.full(len(t), 0.01))
    f = kl_coef(w.case(alert("KLDriftDetected", T0 + 3000)))
    assert f is not None and f.cause and "outside the expected 0.1-0.5" in f.root_cause[0]


def test_kl_coef_must_not_claim_when_live_value_is_in_range_even_if_config_says_0() -> None:
    """The live gauge wins over the static config label (the issue's demo bug, the other way round)."""
    w, t = World(), grid()
    w.put("verl_kl_coef", t, np.full(len(t), 0.2))
    f = kl_coef(w.case(alert("KLDriftDetected", T0 + 3000), kl_coef="0.0"))
    assert f is not None and not f.cause
    assert f.checked == ["kl_coef = 0.2 is within 0.1-0.5 (verl_kl_coef; config says 0.0)"]


def test_kl_coef_missing_live_value() -> None:
    f = kl_coef(Case([alert("KLDriftDetected", T0)], {"kl_coef": "0.2"}, Evidence(T0)))
    assert f is not None and not f.cause
    assert f.missing == ["live kl_coef not measured (no verl_kl_coef samples); config says 0.2 (verl_config_info)"]


def test_rollout_backlog_positive_and_negative() -> None:
    w, t = World(), grid()
    w.put("verl_rollout_buffer_age_seconds", t, np.full(len(t), 2520.0))
    w.put("verl_rollout_workers_alive", t, np.full(len(t), 2.0))
    f = rollout_backlog(w.case(alert("RolloutBacklog", T0 + 3000), rollout_worker_num="2"))
    assert f is not None and f.cause
    assert f.root_cause[0] == ("Rollouts back up: oldest rollout sample is 42 min old (verl_rollout_buffer_age_seconds"
                               " > 30 min), rollout_worker_num = 2 (verl_config_info), 2 worker(s) alive "
                               "(verl_rollout_workers_alive)")
    assert f.suggestion == ["Raise rollout_worker_num from 2 to 4"]
    w2 = World()
    w2.put("verl_rollout_buffer_age_seconds", t, np.full(len(t), 300.0))
    f2 = rollout_backlog(w2.case(alert("RolloutBacklog", T0 + 3000), rollout_worker_num="2"))
    assert f2 is not None and not f2.cause and not f2.suggestion
    assert rollout_backlog(w2.case(alert("KLDriftDetected", T0))) is None  # not its trigger


def buffer_world(growing: bool) -> World:
    w, t = World(T0 + 2400), grid(30.0, 40.0)
    w.put("verl_rollout_buffer_size", t, 5000 + (40 * (t - T0) / 60 if growing else 0 * t), stage="train")
    return w


def test_memory_growth_unbounded_buffer_sets_max_size() -> None:
    w = buffer_world(growing=True)
    f = memory_growth(w.case(alert("MemoryLeakSuspected", T0 + 1800, 60e6, gpu="0"),
                             rollout_buffer_max_size="-1", rollout_buffer_eviction_policy="fifo"))
    assert f is not None and f.cause
    assert "GPU 0 memory rising 60 MB/min" in f.root_cause[0] and "grew 5380 -> 6580 samples" in f.root_cause[0]
    assert "rollout_buffer_max_size = -1 (unbounded, verl_config_info)" in f.root_cause[0]
    assert f.suggestion == ["Set rollout_buffer_max_size: 50000 (now -1) and rollout_buffer_eviction_policy: "
                            "fifo or priority (now fifo)"]


def test_memory_growth_flat_buffer_is_a_leak_not_the_buffer() -> None:
    w = buffer_world(growing=False)
    f = memory_growth(w.case(alert("MemoryLeakSuspected", T0 + 1800, 60e6, gpu="0"), rollout_buffer_max_size="-1"))
    assert f is not None and f.cause and "a leak" in f.root_cause[0] and "holds at 5000 samples" in f.root_cause[0]
    assert not any("rollout_buffer_max_size" in s for s in f.suggestion)


def test_memory_growth_without_buffer_evidence_says_so() -> None:
    w = World()
    f = memory_growth(w.case(alert("MemoryLeakSuspected", T0 + 1800, 60e6), rollout_buffer_max_size="50000"))
    assert f is not None and not f.cause
    assert f.missing[0].startswith("rollout buffer size not measured") and "= 50000" in f.missing[0]


def loader_world(wait_after: float) -> World:
    w, t = World(T0 + 45 * 60), grid(15.0, 45.0)
    w.put("verl_actor_tokens_per_second", t, np.where(t >= T0 + 1200, 6000.0, 12000.0))
    w.put("verl_dataloader_wait_seconds", t, np.where(t >= T0 + 1200, wait_after, 0.01))
    return w


def test_data_loading_positive_with_missing_gpu_utilisation() -> None:
    w = loader_world(0.8)
    f = data_loading(w.case(alert("ThroughputDrop", T0 + 1300), data_num_workers="0",
                            data_persistent_workers="false", data_pin_memory="true"))
    assert f is not None and f.cause
    assert "tokens/s fell 12000 -> 6000" in f.root_cause[0]
    assert "dataloader time per step rose 0.01 -> 0.8 s (verl_dataloader_wait_seconds)" in f.root_cause[0]
    assert "data.num_workers = 0" in f.root_cause[0]
    assert f.suggestion[0].startswith("Set data.num_workers: 8 (now 0), data.persistent_workers: true (now false);")
    assert "GPU utilisation not measured" in f.missing[0]


def test_data_loading_must_not_claim_when_loader_is_steady_and_workers_fine() -> None:
    w = loader_world(0.01)
    f = data_loading(w.case(alert("ThroughputDrop", T0 + 1300), data_num_workers="8"))
    assert f is not None and not f.cause and f.checked[0].endswith("not the data path")


def host_slowed_world(loader_after: float, rest_after: float) -> World:
    """Throughput halves at 20 min; the loader's time goes 0.01 -> ``loader_after`` while the step's other
    stages go 0.5 -> ``rest_after`` s (two timed stages)."""
    w, t = World(T0 + 45 * 60), grid(15.0, 45.0)
    w.put("verl_actor_tokens_per_second", t, np.where(t >= T0 + 1200, 6000.0, 12000.0))
    w.put("verl_stage_seconds", t, np.where(t >= T0 + 1200, loader_after, 0.01), stage="dataloader")
    for stage in ("rollout", "actor_update"):
        w.put("verl_stage_seconds", t, np.where(t >= T0 + 1200, rest_after / 2, 0.25), stage=stage)
    return w


@pytest.mark.parametrize("cpu_bound", [False, True])
def test_a_host_that_slows_every_stage_alike_is_not_blamed_on_data_loading(cpu_bound: bool) -> None:
    # a loaded host (a CI runner, other jobs on the node): the loader's 10 ms became 40 ms -- doubled, by
    # more than 20 ms -- but the rest of the step slowed by 0.5 s; more loader workers would not help
    w = host_slowed_world(0.04, 1.0)
    members = [alert("ThroughputDrop", T0 + 1300)] + ([alert("CPUBoundBottleneck", T0 + 1290)] if cpu_bound else [])
    f = data_loading(w.case(*members, data_num_workers="2"))
    assert f is not None and not f.cause and not f.root_cause
    assert f.checked[0].endswith("every stage slowed alike, the host is slower -- not the data path")
    assert "the other stages slowed too, 0.5 -> 1 s per step (verl_stage_seconds)" in f.checked[0]


def test_a_loader_that_makes_the_slowdown_is_still_data_loading_with_the_other_stages_timed() -> None:
    w = host_slowed_world(0.8, 0.6)  # the loader +0.79 s, the rest +0.1 s
    f = data_loading(w.case(alert("ThroughputDrop", T0 + 1300), data_num_workers="2"))
    assert f is not None and f.cause
    assert "dataloader time per step rose 0.01 -> 0.8 s" in f.root_cause[0]
    assert "the other stages took 0.5 -> 0.6 s per step" in f.root_cause[0]


def test_a_cpu_bound_host_with_a_steady_loader_is_not_data_loading() -> None:
    # a CI runner's other jobs keep the host CPU-bound while the run's tokens per step fall for its own
    # reasons (a policy collapsing to short answers): the loader's measured time held, so it is not the cause
    w = loader_world(0.01)
    f = data_loading(w.case(alert("ThroughputDrop", T0 + 1300), alert("CPUBoundBottleneck", T0 + 1290),
                            data_num_workers="0"))
    assert f is not None and not f.cause and not f.root_cause
    assert "host CPU-bound (CPUBoundBottleneck)" in f.checked[0] and f.checked[0].endswith("not the data path")


def test_cpu_bound_still_implicates_the_data_path_when_the_loader_is_not_measured() -> None:
    w, t = World(T0 + 45 * 60), grid(15.0, 45.0)
    w.put("verl_actor_tokens_per_second", t, np.where(t >= T0 + 1200, 6000.0, 12000.0))
    f = data_loading(w.case(alert("ThroughputDrop", T0 + 1300), alert("CPUBoundBottleneck", T0 + 1290),
                            data_num_workers="2"))
    assert f is not None and f.cause and "data loading starves the trainer" in f.root_cause[0]


def test_a_loader_rise_too_small_for_the_fall_of_tokens_is_not_data_loading() -> None:
    # 10 -> 40 ms doubled by over 20 ms, the other stages held at 0.5 s: halving tokens/s at the same tokens
    # per step needs +0.51 s per step, and the loader gave 0.03 of it -- fewer tokens per step, not a slow loader
    w = host_slowed_world(0.04, 0.5)
    f = data_loading(w.case(alert("ThroughputDrop", T0 + 1300), data_num_workers="2"))
    assert f is not None and not f.cause and not f.root_cause
    assert f.checked[0].endswith("the loader's +0.03 s per step is under half the +0.51 s that the fall of "
                                 "tokens/s needs at the same tokens per step -- not the data path")


def test_one_slow_batch_at_the_end_is_no_loader_rise() -> None:
    w = loader_world(0.01)
    s = w.store.get_or_create("verl_dataloader_wait_seconds", {"node": NODE})
    assert s is not None
    s.append(T0 + 45 * 60 + 1, 0.9)  # the newest sample: one batch waited on a busy host
    w.clock.advance(1)
    f = data_loading(w.case(alert("ThroughputDrop", T0 + 1300), data_num_workers="8"))
    assert f is not None and not f.cause and "held at 0.01 -> 0.01 s" in f.checked[0]


def test_verl_step_timer_is_the_rest_of_the_step_not_added_to_its_stages() -> None:
    # verl's timing_s/step holds gen, update_actor, ...; summing it with them counted the step twice
    w = host_slowed_world(0.04, 1.0)
    t = grid(15.0, 45.0)
    w.put("verl_stage_seconds", t, np.where(t >= T0 + 1200, 1.0, 0.5), stage="step")
    w.put("verl_stage_seconds", t, np.full(len(t), 30.0), stage="validation")
    f = data_loading(w.case(alert("ThroughputDrop", T0 + 1300), data_num_workers="2"))
    assert f is not None and "the other stages slowed too, 0.5 -> 1 s per step" in f.checked[0]


def test_undetermined_diagnosis_reports_what_it_checked() -> None:
    w = loader_world(0.01)
    d = diagnose(["data_loading", "kl_coef"], w.case(alert("ThroughputDrop", T0 + 1300), data_num_workers="8"))
    assert not d.cause and d.root_cause.startswith("Not determined from the evidence: tokens/s fell")
    assert d.annotations()["diagnosis"] == "undetermined"


def test_captured_evidence_is_a_copy_for_the_alerts_nodes_only() -> None:
    w = World()
    t = grid()
    w.put("verl_kl_coef", t, np.zeros(len(t)))
    other = w.store.get_or_create("verl_kl_coef", {"node": "gpu-99"})
    assert other is not None
    other.append(T0, 0.5)
    ev = w.ev.capture(w.clock.now(), {NODE}, {NODE: {"kl_coef": "0.2"}})
    assert [s.labels["node"] for s in ev.series] == [NODE] and ev.config == {NODE: {"kl_coef": "0.2"}}
    live = w.store.get_or_create("verl_kl_coef", {"node": NODE})
    assert live is not None
    live.append(T0 + 7200, 0.3)  # the store moves on; what was handed forward does not
    latest = ev.latest("verl_kl_coef", NODE)
    assert latest is not None and latest.value == 0.0 and ev.latest("verl_kl_coef", "gpu-99") is None


def test_the_pipeline_hands_evidence_forward_with_alerts_and_refreshes_it_while_they_fire(tmp_path) -> None:  # noqa: ANN001
    from monitor.evaluation.rules import load_rules
    from monitor.pipeline import Pipeline

    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n  - {alert: KLDriftDetected, severity: P2, select: verl_kl_divergence,\n"
                     "     detector: {type: threshold, op: '>', value: 1}}\n")
    clock, engine = SimulatedClock(T0), RecordingSink()
    pipe = Pipeline(load_rules(rules), clock, engine=engine)
    kl = pipe.series("verl_kl_divergence", {"node": NODE, "job": "verl"})
    coef_series = pipe.series("verl_kl_coef", {"node": NODE, "job": "verl"})
    info = pipe.series("verl_config_info", {"node": NODE, "job": "verl", "kl_coef": "0.2"})
    assert kl is not None and coef_series is not None and info is not None
    for i in range(6):
        clock.advance(2.0)
        pipe.observe(kl, clock.now(), 5.0)
        pipe.observe(coef_series, clock.now(), 0.0 if i < 3 else 0.1)
        pipe.tick()
    (names, first), *refreshes = engine.calls
    assert names == ["KLDriftDetected"] and first is not None
    assert first.config[NODE]["kl_coef"] == "0.2"  # config labels travel with the evidence, not pushed
    assert first.latest("verl_kl_coef", NODE).value == 0.0
    # while it fires, fresh evidence follows every REDIAGNOSE_S (5 s) with no alert in it
    assert refreshes and all(n == [] for n, _ in refreshes)
    assert refreshes[-1][1].latest("verl_kl_coef", NODE).value == 0.1
    pipe.close()
