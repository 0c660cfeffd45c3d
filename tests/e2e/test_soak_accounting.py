"""The soak's pure parts: the seeded fault plan, its verdicts from the trainer's counters, Meta's ETTR
accounting and the per-fault breakdown of seconds lost (no processes)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from harness import soak_accounting as acct
from harness.cli import soak_args
from harness.soak import ACTED_ON, Fault, Run, Scrape, Soak, parse_scrape, plan_faults
from harness.soak_accounting import productive_seconds
from harness.soak_report import judge, report
from harness.stack import ActiveProcess
from verl.metrics.registry import MetricsRegistry


def test_plan_is_seeded_about_one_per_interval_and_kills_every_fourth() -> None:
    plan = plan_faults(300, 60, seed=7)
    assert plan == plan_faults(300, 60, seed=7)
    assert [f.kind for f in plan] != [f.kind for f in plan_faults(300, 60, seed=8)] or \
        [f.at_s for f in plan] != [f.at_s for f in plan_faults(300, 60, seed=8)]
    assert len(plan) == 5  # 30, 90, 150, 210, 270 s (+-25 %); none in the last 20 s
    assert all(0 < f.at_s < 280 for f in plan)
    assert [f.at_s for f in plan] == sorted(f.at_s for f in plan)
    assert plan[3].kind == "trainer_kill"
    assert sorted(f.kind for f in plan[:3]) == ["critic_oom", "reward_hang", "worker_kill"]


def test_a_reward_hang_never_comes_right_before_a_trainer_kill() -> None:
    # the breaker's alert (for: 30s) needs the hang to outlive the next interval
    for seed in range(40):
        kinds = [f.kind for f in plan_faults(900, 60, seed=seed)]
        assert all(not (a == "reward_hang" and b == "trainer_kill") for a, b in zip(kinds, kinds[1:], strict=False))


def test_recomputed_steps_and_restart_time_are_not_productive() -> None:
    first = {s: float(s) for s in range(1, 11)}        # steps 1..10, one per second, then SIGKILL
    second = {s: 14.0 + s for s in range(6, 16)}       # resumed from checkpoint 5 at t=20, steps 6..15
    # run 1: steps 1..5 survive (5 s); steps 6..10 were recomputed; run 2: 10 steps of 1 s
    assert productive_seconds([first, second], [0, 5]) == pytest.approx(15.0)
    # without a failure every step counts, and the first step gets the median gap, not the start-up
    assert productive_seconds([{s: 10.0 + 2 * s for s in range(1, 6)}], [0]) == pytest.approx(10.0)
    # a restart that found no checkpoint recomputes everything: run 1 contributes nothing
    assert productive_seconds([first, {s: 30.0 + s for s in range(1, 4)}], [0, 0]) == pytest.approx(3.0)


def test_the_counters_judged_are_those_the_trainer_exposes() -> None:
    metrics = MetricsRegistry()  # the trainer's own registry, every catalogue series pre-initialised
    metrics["verl_global_step"].set(41)
    metrics["verl_oom_events_total"].labels(component="critic").inc()
    metrics["verl_rollout_worker_restarts_total"].inc(2)
    scrape = parse_scrape(generate_latest(metrics.registry).decode(), t=3.0)
    assert scrape.t == 3.0 and scrape.step == 41
    assert set(ACTED_ON) == {"reward_hang", "worker_kill", "critic_oom"}  # a SIGKILLed trainer counts nothing
    assert all(series in scrape.counters for series in ACTED_ON.values()), sorted(scrape.counters)
    assert scrape.counters[ACTED_ON["critic_oom"]] == 1.0 and scrape.counters[ACTED_ON["worker_kill"]] == 2.0
    assert scrape.counters[ACTED_ON["reward_hang"]] == 0.0
    assert scrape.counters['verl_oom_events_total{component="actor"}'] == 0.0  # kinds are told apart by label
    with pytest.raises(ValueError):
        parse_scrape("verl_global_step{ 1\n", t=0.0)


def test_a_fault_is_injected_when_its_counter_rose_not_when_the_log_says_so(tmp_path: Path) -> None:
    # the log names every fault (the old regexes would have counted all three); the counters say only the
    # reward hang (timeouts 0 -> 2) and the worker kill (restarts 1 -> 2) were acted on
    log = FakeTrainer([(10.5, "WARNING verl.trainer.fault_injection: fault trigger: critic_oom at step 20 (from f)"),
                       (10.6, "WARNING verl.fault.oom: critic out of memory, degrading"),
                       (30.5, "WARNING verl.workers.pool: rollout worker 1 (pid 42) died with exit code -9"),
                       (50.5, "WARNING verl.trainer.guards: reward model circuit OPEN")])
    timeout, restarts, oom = ACTED_ON["reward_hang"], ACTED_ON["worker_kill"], ACTED_ON["critic_oom"]
    scrapes = [Scrape(9.0, 18, {timeout: 0.0, restarts: 1.0, oom: 0.0}),
               Scrape(31.0, 60, {timeout: 0.0, restarts: 1.0, oom: 0.0}),  # the restart is not counted yet
               Scrape(33.0, 64, {timeout: 0.0, restarts: 2.0, oom: 0.0}),
               Scrape(50.2, 99, {timeout: 0.0, restarts: 2.0, oom: 0.0}),
               Scrape(51.3, 100, {timeout: 2.0, restarts: 2.0, oom: 0.0})]
    r = run({s: 0.5 * s for s in range(1, 131)}, trainer=log)
    r.scrapes = scrapes
    soak = soak_with(tmp_path, [r], end_t=65.0)
    oom_f, kill_f, hang_f = (Fault("critic_oom", 10.0, step=19, injected_at=10.0, run=0),
                             Fault("worker_kill", 30.0, step=59, injected_at=30.0, run=0),
                             Fault("reward_hang", 50.0, step=99, injected_at=50.0, run=0))
    soak.plan = [oom_f, kill_f, hang_f]
    judge(soak)
    assert oom_f.evidence is None and not oom_f.recovered  # logged, never counted: not injected
    assert oom_f.log[1].endswith("degrading")  # but what the trainer said is kept for a person
    assert kill_f.evidence == f"{restarts} 1 -> 2 by step 64 (3.0s after the injection)"
    assert kill_f.step == 59 and kill_f.recovered  # injected during step 59; recovered: steps 69.. completed
    assert kill_f.log == ["WARNING verl.workers.pool: rollout worker 1 (pid 42) died with exit code -9"]
    assert hang_f.evidence is not None and hang_f.evidence.startswith(f"{timeout} 0 -> 2 by step 100")
    assert hang_f.step == 99 and hang_f.recovered
    out = report(soak)
    assert out["faults_injected"] == 2 and out["faults_reached_without_trainer_evidence"] == ["critic_oom"]
    # recovery counts from the step by which the counter was seen: 5 steps past 100 must complete
    r.active.step_times = {s: t for s, t in r.steps.items() if s <= 104}
    judge(soak)
    assert hang_f.evidence is not None and not hang_f.recovered and kill_f.recovered
    # a process first scraped after the injection counts from zero; one never seen rising is no evidence
    fresh = Run(ActiveProcess(2, 0.0, {}, 0), FakeTrainer())  # type: ignore[arg-type]
    fresh.scrapes = [Scrape(5.0, 3, {oom: 1.0})]
    acted = fresh.acted(oom, after=4.0)
    assert acted is not None and (acted.before, acted.after, acted.seen.step) == (0.0, 1.0, 3)
    assert fresh.acted(oom, after=5.0) is None and fresh.acted(timeout, after=0.0) is None


class FakeTrainer:
    def __init__(self, warnings: list[tuple[float, str]] | None = None) -> None:
        self.warnings = warnings or []
        self.requeued = 0

    def alive(self) -> bool:
        return True


def soak_with(tmp_path: Path, runs: list[Run], end_t: float, t0: float = 0.0) -> Soak:
    parser = argparse.ArgumentParser()
    soak_args(parser)
    args = parser.parse_args(["--duration", str(end_t - t0), "--fault-interval", "20", "--output", "r.json",
                              "--no-hot-standby", "--quiet"])
    soak = Soak(args, tmp_path)
    soak.runs, soak.t0, soak.end_t, soak.wall = runs, t0, end_t, end_t - t0
    soak.trainers = list({id(r.trainer): r.trainer for r in runs}.values())
    return soak


def run(steps: dict[int, float], resumed: int = 0, since: float = 0.0, trainer: FakeTrainer | None = None,
        killed_at: float | None = None) -> Run:
    return Run(ActiveProcess(1, since, steps, resumed), trainer or FakeTrainer(), killed_at=killed_at)  # type: ignore[arg-type]


def test_ettr_from_first_step_counts_the_first_step_and_never_exceeds_one(tmp_path: Path) -> None:
    steps = {s: 5.0 + 0.1 * (s - 1) for s in range(1, 101)}  # 0.1 s steps, the first done at 5.0
    steps[101] = 15.5  # completed after the measured end: not productive
    soak = soak_with(tmp_path, [run(steps)], end_t=14.95)  # the last counted step (100) completed at 14.9
    # 100 steps x 0.1 s over the span from the first step's start (4.9) to the end
    assert soak.ettr_from_first_step() == pytest.approx(10.0 / (14.95 - 4.9))
    assert soak.ettr() == pytest.approx(10.0 / 14.95)


def test_a_kill_costs_the_restart_plus_the_steps_redone_after_the_checkpoint() -> None:
    killed = {s: 10.0 + s for s in range(1, 21)}      # steps 1..20 done at 11..30 s, 1 s each
    nxt = {s: 40.0 + (s - 15) for s in range(16, 30)}  # resumed from 15: step 16 done at 41 s
    restart, recomputed = acct.kill_costs(killed, 30.4, 15, nxt, end_t=60.0)
    assert restart == pytest.approx(40.0 - 30.4)      # kill -> the start of the next run's first step
    assert recomputed == pytest.approx(5.0 + 0.4)     # steps 16..20 and the step in flight at the kill
    # nobody took over before the end: the rest of the soak is restart time
    assert acct.kill_costs(killed, 30.4, 15, None, end_t=50.0)[0] == pytest.approx(19.6)


def test_degraded_seconds_are_the_slow_steps_excess_until_the_trainer_is_healthy_again() -> None:
    t, timeline = 0.0, []
    for d in [0.25] * 50 + [3.25, 0.5, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.5]:
        t += d
        timeline.append(acct.StepSpan(t, d))
    median = acct.healthy_median(timeline, before=12.6)
    assert median == pytest.approx(0.25)
    # 3.25 (3 s over) and 0.5 (0.25 over, > 1.5 x median) are degraded; five healthy steps end the fault,
    # so the late 0.5 s step is not charged to it
    assert acct.degraded_seconds(timeline, 12.5, 1e9, median) == pytest.approx(3.0 + 0.25)
    assert acct.degraded_seconds(timeline, 12.5, 12.6, median) == pytest.approx(0.0)  # next fault came first
    assert acct.degraded_seconds(timeline, 0.0, 1e9, None) == 0.0


def test_a_fault_in_the_first_steps_is_priced_against_the_whole_run() -> None:
    # the reward hang lands after two warm-up steps (slow on a loaded machine): their median (1.0 s) would
    # hide the hang's 1.25 s step; the whole run's median (0.25 s) does not
    t, timeline = 10.0, []
    for d in [0.75, 1.25, 1.25] + [0.25] * 40:
        t += d
        timeline.append(acct.StepSpan(t, d))
    median = acct.healthy_median(timeline, before=12.1)
    assert median == pytest.approx(0.25)
    assert acct.degraded_seconds(timeline, 12.1, 1e9, median) == pytest.approx(1.0)
    assert acct.healthy_median([], before=9.0) is None


def test_report_breaks_down_seconds_lost_per_fault_and_sums_to_the_ettr_complement(tmp_path: Path) -> None:
    warn = FakeTrainer([(25.0, "WARNING verl.trainer.fault_injection: fault trigger: reward_hang at step 81 (from f)"),
                        (25.05, "WARNING verl.trainer.fault_injection: fault injection: reward model hangs for 60s"),
                        (26.5, "WARNING verl.trainer.guards: reward model circuit OPEN")])
    # run 1: launched at 0, 5 s start-up, steps of 0.25 s; the hang triggered during step 80 costs step 81
    # 3 s; step 120 done at 38.0, killed at 38.1; run 2 resumed from checkpoint 110, its first step done at 48
    t, first = 5.0, {}
    for s in range(1, 121):
        t += 3.25 if s == 81 else 0.25
        first[s] = t
    second = {s: 48.0 + 0.25 * (s - 111) for s in range(111, 160)}
    runs = [run(first, trainer=warn, killed_at=38.1), run(second, resumed=110, since=39.0)]
    soak = soak_with(tmp_path, runs, end_t=60.0)
    hang = Fault("reward_hang", 24.5, step=80, injected_at=24.9, run=0)  # step 79 done at 24.75
    kill = Fault("trainer_kill", 38.0, step=121, injected_at=38.1, run=0, target_pid=1)
    soak.plan = [hang, kill]
    runs[0].exit_code = -9
    timeout = ACTED_ON["reward_hang"]
    # the trigger acts from step 81's start; its first timeout is counted while step 81 hangs
    runs[0].scrapes = [Scrape(24.0, 76, {timeout: 0.0}), Scrape(25.1, 80, {timeout: 0.0}),
                       Scrape(26.2, 80, {timeout: 1.0})]
    out = report(soak)
    rows = {f["kind"]: f for f in out["faults"]}
    assert rows["reward_hang"]["degraded_s"] == pytest.approx(3.0) and rows["reward_hang"]["restart_s"] == 0
    assert rows["reward_hang"]["step"] == 80 and rows["reward_hang"]["late_s"] == pytest.approx(0.4)
    assert rows["reward_hang"]["evidence"] == f"{timeout} 0 -> 1 by step 80 (1.3s after the injection)"
    assert rows["reward_hang"]["log"][1].endswith("hangs for 60s") and rows["reward_hang"]["recovered"]
    k = rows["trainer_kill"]
    assert k["restart_s"] == pytest.approx(48.0 - 0.25 - 38.1)
    assert k["recomputed_s"] == pytest.approx(10 * 0.25 + 0.1)  # steps 111..120 + the one in flight
    assert k["lost_s"] == pytest.approx(k["restart_s"] + k["recomputed_s"] + k["degraded_s"])
    assert k["evidence"] == "trainer pid 1 exited with code -9 (SIGKILL)" and k["recovered"]
    assert out["faults_injected"] == out["faults_recovered"] == 2
    # 35 s from the hang to the end: RewardModelCircuitOpen's `for: 30s` (+ slack) cannot elapse, so only
    # RewardModelTimeout is expected (and, with no monitor here, not delivered)
    assert out["alerts_expected"] == 1 and out["alerts_delivered"] == 0
    assert out["alerts_not_due"] == ["RewardModelCircuitOpen"]
    assert out["lost_seconds_startup"] == pytest.approx(5.0)
    assert out["lost_seconds_total"] == pytest.approx(60.0 * (1 - out["ettr"]), abs=0.01)
    parts = out["lost_seconds_startup"] + out["lost_seconds_restart"] + out["lost_seconds_recomputed"]
    assert out["lost_seconds_other"] == pytest.approx(out["lost_seconds_total"] - parts, abs=0.02)
    assert abs(out["lost_seconds_other"]) < 0.05  # every unproductive second is attributed
    assert out["degraded_seconds_total"] == pytest.approx(3.0)


def test_a_trigger_without_the_component_acting_is_not_injected(tmp_path: Path) -> None:
    only_trigger = FakeTrainer([(20.05, "WARNING x: fault trigger: critic_oom at step 81 (from f)")])
    runs = [run({s: 5.0 + 0.25 * s for s in range(1, 150)}, trainer=only_trigger)]
    soak = soak_with(tmp_path, runs, end_t=45.0)
    soak.plan = [Fault("critic_oom", 20.0, injected_at=20.0, run=0)]
    oom = ACTED_ON["critic_oom"]  # scraped before and after the trigger, never risen
    runs[0].scrapes = [Scrape(t, int((t - 5.0) / 0.25), {oom: 0.0}) for t in (19.0, 21.0, 23.0, 44.0)]

    out = report(soak)
    assert out["faults_injected"] == 0 and out["faults_reached_without_trainer_evidence"] == ["critic_oom"]
    assert out["faults"][0]["evidence"] is None and not out["faults"][0]["recovered"]
    assert out["faults"][0]["log"] == [only_trigger.warnings[0][1]]  # the trigger line, for a person only
