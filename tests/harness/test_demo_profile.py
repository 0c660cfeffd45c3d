"""The demo's rules profile loads under the monitor's own rules loader: its short windows apply only to
the detector types they were written for (a KLDriftDetected level-shift rule has no `window`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.profile import DEMO_DETECTORS, demo_rules
from monitor.evaluation.rules import load_rules


@pytest.mark.parametrize("host_leak", [False, True])
def test_the_demo_rules_profile_loads(tmp_path: Path, host_leak: bool) -> None:
    path = tmp_path / "rules.demo.yaml"
    path.write_text(yaml.safe_dump(demo_rules(host_leak), sort_keys=False))
    rules = load_rules(path)
    names = {r.alert for r in rules}
    assert {name for name, _ in DEMO_DETECTORS} <= names


def test_every_demo_override_meets_a_rule_of_its_type() -> None:
    doc = demo_rules(False)
    for (name, kind), override in DEMO_DETECTORS.items():
        shortened = [r for r in doc["rules"] if r["alert"] == name and r["detector"]["type"] == kind]
        assert shortened, (name, kind)
        assert all(r["detector"][k] == v for r in shortened for k, v in override.items())


def _kl_steps() -> list[float]:
    path = Path(__file__).resolve().parents[1] / "fixtures" / "demo-kl-healthy-wander.txt"
    return [float(line.split()[1]) for line in path.read_text().splitlines() if not line.startswith("#")]


@pytest.mark.parametrize("steps_per_s", [0.7, 1.0])  # the log holds 40 steps of the fault: enough at these rates
def test_demo_kl_rule_is_quiet_on_the_healthy_wander_and_pages_the_fault(tmp_path: Path, steps_per_s: float) -> None:
    """The CI failure of stop 37: on a slow machine (about 1 step/s) the demo's 60 s KL window is 60 steps of
    the tiny trainer's healthy wander, which paged before the fault. Scraped every second as the demo does."""
    path = tmp_path / "rules.demo.yaml"
    path.write_text(yaml.safe_dump(demo_rules(False), sort_keys=False))
    rule = next(r for r in load_rules(path) if r.alert == "KLDriftDetected"  # the live trainer's rule comes first
                and r.conditions[0].detector_type == "drift")
    detector = rule.conditions[0].new_detector()
    kl = _kl_steps()
    fault_step, first = 120, None
    t = 3.0 / steps_per_s  # the monitor starts a few steps into the run
    while int(t * steps_per_s) < len(kl):
        step = int(t * steps_per_s) + 1
        if detector.update(t, kl[step - 1]).active and first is None:
            first = step
        t += 1.0
    assert first is not None and first > fault_step, f"first active at step {first}"


@pytest.mark.parametrize("gpu_seen", [True, False])
def test_the_demo_watches_host_memory_for_a_leak_wherever_the_actor_is_on_the_cpu(
        monkeypatch: pytest.MonkeyPatch, gpu_seen: bool) -> None:
    """The leak is allocated on the actor's device: ppo_tiny pins it to the CPU, so even where NVML sees a
    GPU (an H200 machine: the demo watched the idle GPU and missed the leak) its memory is the trainer's RSS."""
    import torch

    from harness import stack

    monkeypatch.setattr(stack, "_has_gpu", lambda: gpu_seen)  # NVML: a trainer started elsewhere
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu_seen)  # what verl-train resolves `auto` with
    demo_args = ("--config", "ppo_tiny", "--metrics-port", "0", "trainer.total_steps=5")
    assert stack._leak_on_gpu(demo_args) is False
    assert stack._leak_on_gpu((*demo_args, "actor.device=auto")) is gpu_seen
    assert stack._leak_on_gpu((*demo_args, "actor.device=cuda:0")) is True
    assert stack._leak_on_gpu(None) is gpu_seen  # a trainer started elsewhere: what NVML sees


def _rss_trace() -> list[tuple[float, float]]:
    path = Path(__file__).resolve().parents[1] / "fixtures" / "demo-trainer-rss-loaded.txt"
    return [(float(t), float(r)) for t, r, _ in (line.split() for line in path.read_text().splitlines()
                                                 if not line.startswith("#"))]


@pytest.mark.parametrize("pace", [0.5, 1.0, 2.0])  # the recorded run stretched or squeezed: slower or faster machines
@pytest.mark.parametrize("leak_mb_per_min", [0, 300])
def test_the_demo_host_leak_rule_is_quiet_on_a_warming_trainer_and_pages_the_simulated_leak(
        tmp_path: Path, pace: float, leak_mb_per_min: int) -> None:
    """Stop 38's CI failure: on a loaded runner the KL demo paged "a leak" -- the trainer's RSS ratcheting up
    through its first ~40 steps filled the host rule's 45 s window. The monitor starts when /metrics is served
    (~48 s into the recording) and scrapes every second, as the demo does."""
    path = tmp_path / "rules.demo.yaml"
    path.write_text(yaml.safe_dump(demo_rules(True), sort_keys=False))
    detectors = [r.conditions[0].new_detector() for r in load_rules(path) if r.alert == "MemoryLeakSuspected"
                 and "verl-process" in r.conditions[0].selectors[0].text]  # a copy of each GPU-memory leak rule
    assert detectors
    trace = [(t / pace, rss) for t, rss in _rss_trace()]
    start, first = 48.0 / pace, None
    times, values = zip(*trace, strict=True)
    t = start
    while t < times[-1]:
        rss = float(np.interp(t, times, values)) + leak_mb_per_min * 1e6 * (t - start) / 60.0
        if any([d.update(t, rss).active for d in detectors]) and first is None:
            first = t - start
        t += 1.0
    if leak_mb_per_min:
        assert first is not None and first <= 60.0, first
    else:
        assert first is None, f"paged {first:.0f} s after the monitor started"


def test_a_cpu_torch_on_a_gpu_machine_puts_an_auto_actor_and_its_leak_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """`actor.device=auto` is what verl-train resolves it to (torch's CUDA), not whether NVML sees a GPU: the
    CPU torch wheel on a GPU machine trains on the CPU, so the leak is the trainer's RSS."""
    import torch

    from harness import stack

    monkeypatch.setattr(stack, "_has_gpu", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert stack._leak_on_gpu(("--config", "ppo_tiny", "actor.device=auto")) is False


def test_the_shipped_demo_profile_is_the_demos_and_run_takes_it() -> None:
    """`verl-monitor run --rules demo`: the short windows the demo uses, as a file a newcomer can read."""
    from monitor.run_flags import DEMO_RULES, default_config, label_and_rules

    assert yaml.safe_load(DEMO_RULES.read_text(encoding="utf-8")) == demo_rules(False)
    assert label_and_rules(default_config(), rules=["demo"]).rules == [DEMO_RULES]
    assert {r.alert for r in load_rules(DEMO_RULES)} >= {name for name, _ in DEMO_DETECTORS}
