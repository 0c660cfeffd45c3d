"""The soak's JSON report: whether each fault was acted on and recovered, what it cost, ETTR, prompts, alerts.

Reads a finished ``harness.soak.Soak`` (its plan, runs with their scrapes of the trainer's counters, and the
journal); the time accounting itself is ``harness/soak_accounting.py``.
"""

from __future__ import annotations

import statistics
from typing import Any

from harness import soak_accounting as acct
from harness.soak import ACTED_ON, RECOVERY_STEPS, Fault, Run, Soak

# alerts an operator must receive for each kind; a SIGKILL + automatic resume is handled, not paged,
# unless the trainer stayed down longer than TrainerDown's `for: 1m` (see TRAINER_DOWN_AFTER_S)
EXPECTED: dict[str, tuple[str, ...]] = {
    "reward_hang": ("RewardModelTimeout", "RewardModelCircuitOpen"),
    "worker_kill": ("RolloutWorkerCrash",),
    "critic_oom": (),
    "trainer_kill": (),
}
TRAINER_DOWN_AFTER_S = 65.0  # TrainerDown's `for: 1m` plus scrape and evaluation slack
# An expected alert with a `for:` hold can only fire when the soak trains on that long after the fault:
# its `for:` (monitor/rules/default.yaml) plus the breaker's timeouts, scrape and evaluation slack. A fault
# injected later than that before the end does not expect it unless it fired (`alerts_not_due`).
ALERT_NEEDS_S = {"RewardModelCircuitOpen": 40.0}
PROMPT_COUNTERS = ("verl_rollout_prompts_lost_total", "verl_rollout_prompts_duplicated_total")


def _run_end(soak: Soak, i: int) -> float:
    run = soak.runs[i]
    if run.killed_at is not None:
        return run.killed_at
    return soak.runs[i + 1].active.since if i + 1 < len(soak.runs) else float("inf")


def _warnings_after(run: Run, t: float, until: float) -> list[str]:
    return [ln for at, ln in list(run.trainer.warnings) if t <= at < until]


LOG_LINES = 3  # of the trainer's warnings after a fault, kept beside the verdict


def judge(soak: Soak) -> None:
    """Evidence that the trainer acted on each injected fault (its counter rose, or the SIGKILLed process
    exited), and its recovery: ``RECOVERY_STEPS`` steps completed past the step by which it was seen acting;
    what the trainer logged meanwhile goes beside it."""
    for f in soak.plan:
        if f.injected_at is None or f.run is None:
            continue
        run, until = soak.runs[f.run], _run_end(soak, f.run)
        acted_by = f.step or 0
        if f.kind == "trainer_kill":
            if soak.hot_standby:
                nxt = next((r for r in soak.runs[f.run + 1:] if r.active.since >= f.injected_at), None)
                if nxt is not None:
                    f.evidence = f"hot-standby: active trainer pid {nxt.active.pid} took over"
            elif run.exit_code == -9:
                f.evidence = f"trainer pid {f.target_pid} exited with code -9 (SIGKILL)"
        elif (acted := run.acted(ACTED_ON[f.kind], f.injected_at)) is not None:
            acted_by = max(acted_by, acted.seen.step)
            f.evidence = (f"{ACTED_ON[f.kind]} {acted.before:g} -> {acted.after:g} by step {acted.seen.step} "
                          f"({acted.seen.t - f.injected_at:.1f}s after the injection)")
            until = min(until, acted.seen.t + 1.0)  # the log lines of its acting, not what came later
        f.log = _warnings_after(run, f.injected_at, until)[:LOG_LINES] if f.kind in ACTED_ON else []
        f.recovered = f.evidence is not None and any(
            s >= acted_by + RECOVERY_STEPS and t > f.injected_at for r in soak.runs[f.run:] for s, t in r.steps.items())


def price(soak: Soak) -> None:
    """``Fault.costs``: restart, recomputed and degraded seconds of each injected fault."""
    runs, resumed, end = soak.step_runs(), soak.resumed(), soak.end_t
    timeline = sorted((x for steps in runs for x in acct.spans(steps)), key=lambda x: x.t)
    injected = sorted((f for f in soak.plan if f.injected_at is not None and f.run is not None),
                      key=lambda f: f.injected_at or 0.0)
    for k, f in enumerate(injected):
        assert f.injected_at is not None and f.run is not None
        next_fault = injected[k + 1].injected_at if k + 1 < len(injected) else None
        until = min(end, next_fault if next_fault is not None else end)
        median = acct.healthy_median(timeline, f.injected_at)
        restart = recomputed = degraded = 0.0
        i = f.run
        if f.kind == "trainer_kill" and soak.runs[i].killed_at is not None:
            later = next((steps for steps in runs[i + 1:] if steps), None)
            next_resumed = resumed[i + 1] if i + 1 < len(runs) else max(runs[i], default=0)
            restart, recomputed = acct.kill_costs(runs[i], soak.runs[i].killed_at or f.injected_at, next_resumed,
                                                  later, end)
            if later:
                degraded = acct.degraded_seconds(acct.spans(later), min(later.values()), until, median)
        else:
            degraded = acct.degraded_seconds(acct.spans(runs[i]), f.injected_at, min(until, _run_end(soak, i)), median)
        f.costs = {"restart_s": round(restart, 2), "recomputed_s": round(recomputed, 2),
                   "degraded_s": round(degraded, 2), "lost_s": round(restart + recomputed + degraded, 2)}


def _alerts(soak: Soak, injected: list[Fault]) -> tuple[int, int, list[float], list[str]]:
    fired, delivered = soak.alert_times(), soak.delivered()
    expected = delivered_n = 0
    delays: list[float] = []
    not_due: list[str] = []
    for f in injected:
        names = EXPECTED[f.kind]
        if f.kind == "trainer_kill" and f.costs.get("restart_s", 0.0) > TRAINER_DOWN_AFTER_S:
            names = ("TrainerDown",)  # down longer than TrainerDown's `for: 1m`: the operator must hear
        for name in names:
            at = f.injected_at or 0.0
            after = [(t, fp) for t, fp in fired.get(name, []) if t >= at]
            if not after and soak.end_t - at < ALERT_NEEDS_S.get(name, 0.0):
                not_due.append(name)  # it did not fire, and could not have yet: no miss
                continue
            expected += 1
            if after:
                delays.append(after[0][0] - at)
                if after[0][1] in delivered:
                    delivered_n += 1
            elif (fp := soak.firing_at(name, at)) is not None and fp in delivered:
                delivered_n += 1  # still firing (and notified) from an earlier fault: no new page
    return expected, delivered_n, delays, not_due


def _prompt_totals(soak: Soak) -> dict[str, float | None]:
    """Counters restart with each process: sum every run's last scrape. ``None`` when a run that
    trained never exposed a counter (then the soak cannot vouch for its prompts)."""
    ran = [r for r in soak.runs if r.steps]
    return {name: (sum(r.counters[name] for r in ran) if all(name in r.counters for r in ran) else None)
            for name in PROMPT_COUNTERS}


def _fault_row(soak: Soak, f: Fault) -> dict[str, Any]:
    injected_s = None if f.injected_at is None else round(f.injected_at - soak.t0, 1)
    return {"kind": f.kind, "planned_s": f.at_s, "injected_s": injected_s,
            "late_s": None if injected_s is None else round(injected_s - f.at_s, 1), "step": f.step,
            "target_pid": f.target_pid, "evidence": f.evidence, "log": f.log, "recovered": f.recovered,
            **(f.costs or dict.fromkeys(("restart_s", "recomputed_s", "degraded_s", "lost_s")))}


def report(soak: Soak) -> dict[str, Any]:
    judge(soak)
    price(soak)
    reached = [f for f in soak.plan if f.injected_at is not None]
    injected = [f for f in reached if f.evidence is not None]
    expected, delivered_n, delays, not_due = _alerts(soak, injected)
    fired = soak.alert_times()
    runs = soak.step_runs()
    productive = acct.productive_seconds(runs, soak.resumed())
    lost_total = max(0.0, soak.wall - productive)
    first = acct.first_step_start(runs[0]) if runs else None
    startup = soak.wall if first is None else first - soak.t0
    by_kind = {k: round(sum(f.costs.get(f"{k}_s", 0.0) for f in reached), 2) for k in ("restart", "recomputed", "degraded")}
    totals = _prompt_totals(soak)
    lost, dup = totals["verl_rollout_prompts_lost_total"], totals["verl_rollout_prompts_duplicated_total"]
    stepped = [steps for steps in runs if steps]
    return {
        "ettr": round(soak.ettr(), 4),
        # the initial start-up is the same with or without faults: this isolates what the faults cost
        "ettr_from_first_step": round(soak.ettr_from_first_step(), 4),
        "faults_injected": len(injected),
        "faults_recovered": sum(f.recovered for f in injected),
        "prompts_lost": lost,
        "prompts_duplicated": dup,
        "alerts_expected": expected,
        "alerts_delivered": delivered_n,
        "mean_detect_seconds": round(statistics.mean(delays), 2) if delays else None,
        # expected alerts whose `for:` could not elapse before the end (a fault late in the soak)
        "alerts_not_due": not_due,
        # wall - productive (= wall x (1 - ettr)): start-up + each fault's restart and recomputed seconds +
        # other (e.g. a trainer that died without a fault); degraded seconds are productive for ETTR
        "lost_seconds_total": round(lost_total, 2),
        "lost_seconds_startup": round(startup, 2),
        "lost_seconds_restart": by_kind["restart"],
        "lost_seconds_recomputed": by_kind["recomputed"],
        "lost_seconds_other": round(lost_total - startup - by_kind["restart"] - by_kind["recomputed"], 2),
        "degraded_seconds_total": by_kind["degraded"],
        "faults": [_fault_row(soak, f) for f in soak.plan],
        "faults_reached_without_trainer_evidence": [f.kind for f in reached if f.evidence is None],
        "faults_planned_not_reached": sum(1 for f in soak.plan if f.injected_at is None),
        "hot_standby": soak.hot_standby,
        "restarts": len(soak.runs) - 1,
        "supervisor_restarts": len(soak.trainers) - 1,
        "restart_port_wait_seconds": soak.port_wait,
        "counter_scrape_failures": soak.scrape_failures,
        # last step before the kill -> first step after the resume
        "restart_seconds": [round(min(b.values()) - max(a.values()), 2) for a, b in zip(stepped, stepped[1:], strict=False)],
        "prompts_requeued": sum(t.requeued for t in soak.trainers),
        "alerts_fired": sorted(fired),
        # fired although no injected fault calls for them: the monitor's false alarms, or the trainer's
        # own trouble (e.g. the reward guard pausing a batch while the toy policy wobbles)
        "alerts_unexpected": sorted(set(fired) - {n for names in EXPECTED.values() for n in names} - {"TrainerDown"}),
        "final_step": soak._last_step(),
        "duration_s": soak.args.duration,
        "workdir": str(soak.workdir),
        "notes": [
            "prompts_lost/prompts_duplicated: the trainer's per-step check of rollouts against prompts, summed "
            "over trainer processes from the last scrape of each (polled every 2 s); across a SIGKILL the "
            "resumed run re-draws the prompts after its checkpoint exactly (see the exact-resume tests), so the "
            "recomputed steps neither lose nor repeat prompts in the surviving run"]
        if lost is not None else [
            "prompts_lost/prompts_duplicated: a trainer process never exposed verl_rollout_prompts_lost_total / "
            "verl_rollout_prompts_duplicated_total, so they are reported as null"],
    }
