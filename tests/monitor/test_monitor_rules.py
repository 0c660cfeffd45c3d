"""Default rules against the shared catalogue and the trainer's metric names; rule-file errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from monitor_scenarios import T0, firing, run, times

from monitor.evaluation.rules import RuleError, load_rule_files, load_rules
from monitor.series.selectors import parse_selector
from monitor.sources import ray_state, stragglers, verl_checkpoints
from monitor.sources.alertmanager import CATALOGUE
from monitor.sources.prom_text import parse_exposition
from monitor.sources.verl_gaps import COLLECTIVE_LEFT
from monitor.sources.verl_jsonl import IN_PROGRESS
from monitor.sources.verl_keys import GAP_PREFIX, map_key
from verl.metrics.catalog import BY_NAME

# dcgm-exporter field names the defaults use (dcgm-exporter's default counters CSV).
DCGM_FIELDS = {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP",
               "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
               "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"}


def test_defaults_cover_the_catalogue_with_its_severities() -> None:
    rules = load_rule_files(None)
    assert {r.alert for r in rules} == set(CATALOGUE)
    for r in rules:
        assert r.severity == CATALOGUE[r.alert], r.alert
        assert "summary" in r.templates and "runbook" in r.templates, r.alert


VERL_JSONL_LABELS = {"job", "stat"}
# verl's peers (issue 33): names in their own output (tests/fixtures: vLLM, SGLang, Ray, node_exporter),
# with the labels they carry, and the Ray State API source's own series
PEER_SERIES: dict[str, set[str]] = {}
for _fixture in (Path(__file__).resolve().parents[1] / "fixtures").glob("*.prom"):
    for _line in _fixture.read_text().splitlines():
        if _line and not _line.startswith("#"):
            _sample = parse_exposition(_line, 0.0, "t", None, {})
            for _s in _sample.samples:
                PEER_SERIES.setdefault(_s.name, set()).update(_s.labels)
PEER_SERIES[ray_state.SERIES] = {"cause", "kind", "actor_class", "pid", "node", "reason"}
# series the monitor derives itself: from verl's checkpoint directory and per-rank times (issue 33)
DERIVED = set(verl_checkpoints.DERIVED_SERIES) | set(stragglers.DERIVED_SERIES)


# series only a verl log has (issue 32): its unmapped keys (verl_jsonl_<key>), its validation keys and the
# training score's gap to them (both labelled with the validation key)
VALIDATION = map_key("val-core/openai/gsm8k/reward/mean@1")
GAP = map_key(GAP_PREFIX + "val-core/openai/gsm8k/reward/mean@1")


def jsonl_only(selector) -> bool:
    return selector.name is not None and (selector.name.startswith("verl_jsonl_")
                                          or selector.name in (VALIDATION.name, GAP.name))


def test_default_selectors_name_real_series() -> None:
    used = set()
    for r in load_rule_files(None):
        for c in r.conditions:
            for s in c.selectors:
                if s.name is None:  # the signal catalogue's watcher of every other series of a verl log
                    assert r.alert == "UncataloguedSignalShift" and r.severity == "P3", s.text
                    assert any(m.name == "job" and m.value == "verl_jsonl" for m in s.matchers), s.text
                    continue
                used.add(s.name)
                if jsonl_only(s):  # then the rule must say it reads a verl log
                    assert any(m.name == "job" and m.value == "verl_jsonl" for m in s.matchers), s.text
                    assert {m.name for m in s.matchers} <= {"job", *VALIDATION.labels}, s.text
                    continue
                # up, the running step's seconds and those left before NCCL's timeout are the monitor's own
                # (the verl log tail's liveness)
                assert (s.name in BY_NAME or s.name in DCGM_FIELDS or s.name in ("up", IN_PROGRESS, COLLECTIVE_LEFT)
                        or s.name in PEER_SERIES or s.name in DERIVED), s.name
                if s.name in PEER_SERIES:
                    assert {m.name for m in s.matchers} <= PEER_SERIES[s.name], s.text
                    continue
                spec = BY_NAME.get(s.name)
                for m in s.matchers:  # label matchers only on labels the trainer exports, or the ones the
                    # verl JSONL source adds to its series (job="verl_jsonl", stat="peak" on torch peaks)
                    assert (spec is None or m.name in spec.labels or s.name in ("up", IN_PROGRESS, COLLECTIVE_LEFT)
                            or m.name in VERL_JSONL_LABELS), (s.name, m.name)
    # both name families are covered for memory, temperature, XID and NVLink
    assert {"verl_gpu_memory_used_bytes", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_XID_ERRORS"} <= used


@pytest.mark.parametrize("text,needle", [
    ("rules: {}", "top-level 'rules:' list"),
    ("rules:\n  - {alert: X, severity: P1, select: up, detector: {type: nope}}", "detector.type"),
    ("rules:\n  - {alert: X, severity: P1, select: up, detector: {type: threshold, bogus: 1}}", "detector.bogus"),
    ("rules:\n  - {alert: X, severity: P1, select: 'up{a=b}', detector: {type: threshold}}", "select"),
    ("rules:\n  - {alert: X, severity: P1, for: soon, select: up, detector: {type: threshold}}", ".for"),
    ("rules:\n  - {alert: X, severity: P1, select: up, detector: {type: threshold}, summary: '{{ x'}", "summary"),
    ("rules:\n  - {alert: X, severity: P1, select: up, detector: {type: threshold}, extra: 1}", "extra"),
    ("rules: [", "not valid YAML"),
])
def test_rule_errors_name_the_key(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "r.yaml"
    f.write_text(text)
    with pytest.raises(RuleError) as exc:
        load_rules(f)
    assert needle in str(exc.value) and str(f) in str(exc.value) and "\n" not in str(exc.value)


def test_compound_durations_mean_the_same_as_in_correlation_rules(tmp_path: Path) -> None:
    """One parser: `1h30m` in a monitor rule is what it is in alerting's correlation rules."""
    from alerting.durations import parse_duration as alerting_duration

    f = tmp_path / "r.yaml"
    f.write_text("rules:\n  - {alert: X, severity: P1, for: 1h30m, keep_firing_for: 2m30s, select: up,\n"
                 "     detector: {type: threshold, op: '>', value: 1}}\n")
    (rule,) = load_rules(f)
    assert rule.for_s == 5400.0 == alerting_duration("1h30m", "window")
    assert rule.keep_firing_for_s == 150.0


def test_a_rules_file_is_parsed_once_per_text_and_again_once_edited(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from monitor.evaluation import rules as rules_module

    parsed: list[Path] = []
    parse = rules_module._parse_rules
    monkeypatch.setattr(rules_module, "_parse_rules", lambda path, data: parsed.append(path) or parse(path, data))
    f = tmp_path / "r.yaml"
    f.write_text("rules:\n  - {alert: X, severity: P1, select: up, detector: {type: threshold, op: '>', value: 1}}\n")
    first, again = load_rules(f), load_rules(f)
    assert parsed == [f] and first == again and first is not again  # the caller's list is its own
    f.write_text(f.read_text().replace("P1", "P2"))  # same size, maybe the same mtime: the text decides
    (edited,) = load_rules(f)
    assert parsed == [f, f] and edited.severity == "P2"
    f.write_text("rules: [")
    with pytest.raises(RuleError, match="not valid YAML"):  # an error is never served from the cache
        load_rules(f)


def test_selector_matchers() -> None:
    s = parse_selector('verl_oom_events_total{component=~"reward.*", node!="x"}')
    assert s.matches("verl_oom_events_total", {"component": "reward_model", "node": "a"})
    assert not s.matches("verl_oom_events_total", {"component": "critic", "node": "a"})
    assert not s.matches("verl_oom_events_total", {"component": "reward", "node": "x"})
    assert parse_selector('{__name__=~"DCGM_.*"}').matches("DCGM_FI_DEV_FB_USED", {})


def test_compound_condition_joins_on_node() -> None:
    """CPU saturated on gpu-02, GPU memory swinging on gpu-03: not a CPU-bound bottleneck anywhere."""
    rng = np.random.default_rng(0)
    t = times(900, 5.0)
    cpu = np.full(len(t), 0.98)
    mem = 40e9 * (1 + 0.1 * np.sin((t - T0) / 7.0)) + rng.normal(0, 1e6, len(t))
    recs = run([("verl_host_cpu_utilization_ratio", {"node": "gpu-02"}, t, cpu),
                ("verl_gpu_memory_used_bytes", {"gpu": "0", "node": "gpu-03"}, t, mem)])
    assert firing(recs, "CPUBoundBottleneck") == []
    recs = run([("verl_host_cpu_utilization_ratio", {"node": "gpu-03"}, t, cpu),
                ("verl_gpu_memory_used_bytes", {"gpu": "0", "node": "gpu-03"}, t, mem)])
    assert len(firing(recs, "CPUBoundBottleneck")) == 1


def test_both_families_for_one_gpu_give_one_alert() -> None:
    t = times(900, 5.0)
    recs = run([("verl_gpu_temperature_celsius", {"gpu": "0", "node": "n"}, t, np.full(len(t), 90.0)),
                ("DCGM_FI_DEV_GPU_TEMP", {"gpu": "0", "Hostname": "n", "UUID": "GPU-1"}, t, np.full(len(t), 90.0))])
    assert len(firing(recs, "GPUOverTemperature")) == 1
