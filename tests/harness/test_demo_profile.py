"""The demo's rules profile loads under the monitor's own rules loader: its short windows apply only to
the detector types they were written for (a KLDriftDetected level-shift rule has no `window`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.profile import DEMO_DETECTORS, demo_rules
from monitor.rules import load_rules


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
