"""``make demo`` fails loudly: a fault the summary shows as MISSED makes the demo exit 1 (last round it printed
MISSED for the memory leak and exited 0). The demo's run is replaced by a summary; the real run is
tests/e2e/test_demo_smoke.py's."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pytest

from harness import demo
from harness.stack import Journal

LEAK = demo.DEMO_PLAN[0]


def _summary(journal: Journal) -> dict[str, Any]:
    return demo.summarize(journal, [LEAK], {1: 10.0}, trainer_started=5.0)


def _run_with(monkeypatch: pytest.MonkeyPatch, summary: dict[str, Any], tmp_path: Path) -> tuple[int, dict]:
    def fake_run(args: argparse.Namespace) -> dict[str, Any]:
        return {**summary, "expected_alerts": list(LEAK.expects), "last_step": 90, "wall_seconds": 1.0,
                "workdir": str(tmp_path)}

    monkeypatch.setattr(demo, "run_demo", fake_run)
    out = tmp_path / "summary.json"
    code = demo.main(["--faults", "leak", "--quiet", "--summary-json", str(out)])
    return code, json.loads(out.read_text())


def test_a_missed_fault_exits_1_and_a_caught_one_0(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    journal = Journal(t0=time.time() - 100.0, echo=False)  # events land ~100 s after the start
    missed = _summary(journal)  # the leak never fired
    code, written = _run_with(monkeypatch, missed, tmp_path)
    assert code == 1 and not written["all_detected_and_delivered"]
    assert "MISSED" in capsys.readouterr().out

    journal.add("alert", None, status="firing", alertname="MemoryLeakSuspected", fingerprint="fp1")
    journal.add("notification", None, status="delivered", fingerprints=["fp1"], notification_status="firing")
    detected = _summary(journal)  # fired and delivered, but no page named the cause and fix yet
    assert detected["all_detected_and_delivered"] and not detected["all_diagnosed"]
    assert _run_with(monkeypatch, detected, tmp_path)[0] == 1

    journal.add("message", None, text="Root Cause: memory rising 310.0 MB/min, a leak\n"
                                      "Suggestion: free tensors kept across steps")
    caught = _summary(journal)
    assert caught["all_detected_and_delivered"] and caught["all_diagnosed"]
    code, written = _run_with(monkeypatch, caught, tmp_path)
    assert code == 0 and written["all_detected_and_delivered"]
    assert "every injected fault detected and delivered" in capsys.readouterr().out


def test_a_healthy_run_misses_nothing() -> None:
    assert demo.every_fault_caught({"faults": [], "all_detected_and_delivered": True, "all_diagnosed": True})


def test_an_alert_the_kl_fault_causes_after_its_injection_is_no_unexpected_alert() -> None:
    """Issue 32: with kl_coef forced to 0 the toy policy runs away and the trainer's reward guard pauses its
    batches; RewardVarianceSpike then is the KL fault's consequence -- but only after the fault was injected."""
    kl = next(inj for inj in demo.DEMO_PLAN if inj.key == "kl")
    journal = Journal(t0=time.time() - 100.0, echo=False)
    journal.add("alert", None, status="firing", alertname="RewardVarianceSpike", fingerprint="early")
    before = demo.summarize(journal, [kl], {119: 200.0}, trainer_started=5.0)  # fired before the injection
    assert before["unexpected_alerts"] == ["RewardVarianceSpike"] and before["caused_alerts"] == {}

    after = demo.summarize(journal, [kl], {119: 50.0}, trainer_started=5.0)  # injected at 50 s, fired at ~100 s
    assert after["unexpected_alerts"] == [] and after["caused_alerts"] == {"RewardVarianceSpike": kl.name}
    journal.add("alert", None, status="firing", alertname="TrainerDown", fingerprint="other")
    assert demo.summarize(journal, [kl], {119: 50.0}, trainer_started=5.0)["unexpected_alerts"] == ["TrainerDown"]


def test_an_expected_alert_that_pages_before_its_fault_is_a_false_page_not_a_detection(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Stop 37's CI: KLDriftDetected paged 44 s before kl_coef was zeroed and the demo counted it as detected
    at "-43.9 s". A page before the fault is false; only a firing at or after the injection detects it."""
    kl = next(inj for inj in demo.DEMO_PLAN if inj.key == "kl")
    journal = Journal(t0=time.time() - 100.0, echo=False)  # this firing lands ~100 s after the start
    journal.add("alert", None, status="firing", alertname="KLDriftDetected", fingerprint="early")
    journal.add("notification", None, status="delivered", fingerprints=["early"], notification_status="firing")
    early = demo.summarize(journal, [kl], {119: 150.0}, trainer_started=5.0)  # injected at 150 s
    assert early["false_pages"] == [{"alertname": "KLDriftDetected", "t": pytest.approx(100.0, abs=2.0),
                                     "before": kl.name}]
    assert early["faults"][0]["alerts"]["KLDriftDetected"]["detected"] is None and not early["all_detected_and_delivered"]
    assert not demo.every_fault_caught({**early, "all_detected_and_delivered": True, "all_diagnosed": True})

    on_time = demo.summarize(journal, [kl], {119: 50.0}, trainer_started=5.0)  # injected at 50 s
    assert on_time["false_pages"] == [] and on_time["faults"][0]["alerts"]["KLDriftDetected"]["detected"] is not None
    code, _ = _run_with(monkeypatch, early, tmp_path)
    assert code == 1 and "FALSE PAGE: KLDriftDetected" in capsys.readouterr().out
