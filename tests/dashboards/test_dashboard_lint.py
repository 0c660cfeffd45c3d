"""Grafana dashboards: generated JSON is current, lint-clean, valid PromQL, and shows what SPEC §7 asks."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # dashboards/ is a tool directory next to the packages, not installed

from dashboards.gen import lint  # noqa: E402
from verl.metrics.catalog import CATALOG, STAGES  # noqa: E402

DASHBOARDS = ("verl-training.json", "gpu-dcgm.json", "monitor.json")


def load(name: str) -> dict:
    return json.loads((ROOT / "dashboards" / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def known() -> set[str]:
    return lint.known_metrics()


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found; fix: `make promtool` (installs Debian's prometheus package)")
    return path


def test_committed_json_matches_generator() -> None:
    result = subprocess.run([sys.executable, "-m", "dashboards.gen", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", DASHBOARDS)
def test_dashboard_is_lint_clean(name: str, known: set[str]) -> None:
    assert lint.lint(load(name), known) == []


def test_linter_reports_each_defect(known: set[str]) -> None:
    broken = copy.deepcopy(load("verl-training.json"))
    panels = [p for p in broken["panels"] if p["type"] != "row"]
    panels[0]["fieldConfig"]["defaults"]["unit"] = ""
    panels[1]["description"] = " "
    panels[2]["targets"] = []
    panels[3]["targets"][0]["expr"] = 'sum(rate(verl_rollout_worker_restarts_total{job="x"}[5m]))'
    panels[4]["targets"][0]["expr"] = "max(verl_made_up_metric)"
    panels[5]["datasource"] = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    broken["templating"]["list"] = [v for v in broken["templating"]["list"] if v["name"] != "job"]
    problems = "\n".join(lint.lint(broken, known))
    for expected in ("no unit", "no description", "no targets", "not over $__rate_interval",
                     "unknown metric verl_made_up_metric", "not the ${datasource} variable",
                     "no `job` template variable", "${DS_...} import inputs"):
        assert expected in problems, expected


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (stage) (rate(a_total{job=~"$job", x="y"}[$__rate_interval]))', {"a_total"}),
    ("histogram_quantile(0.99, sum by (le) (rate(h_bucket[1m]))) * 60 / 1e6", {"h_bucket"}),
    ("x / ignoring(stage) group_left() sum without(stage) (x) > bool 2", {"x"}),
    ("level:metric:op offset 10m or on() vector(0)", {"level:metric:op"}),
    ('label_replace(vector(0), "reason", "none", "", "") and ALERTS{alertstate="firing"}', {"ALERTS"}),
])
def test_metric_name_extraction(expr: str, names: set[str]) -> None:
    assert lint.metric_names(expr) == names


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each panel and variable query (Grafana variables substituted) as a recording rule."""
    rules = []
    for name in DASHBOARDS:
        for panel in lint.panels(load(name)):
            for target in panel["targets"]:
                rules.append({"record": f"panel:{panel['id']}:{target['refId']}",
                              "expr": lint.substitute(target["expr"])})
    assert len(rules) > 90
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run([promtool(), "check", "rules", "--lint=none", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_variables_are_import_and_provisioning_ready() -> None:
    for name in DASHBOARDS:
        variables = {v["name"]: v for v in load(name)["templating"]["list"]}
        assert variables["datasource"]["query"] == "prometheus"
        for var in ("job", "instance"):
            assert variables[var]["includeAll"] and variables[var]["multi"], (name, var)
            assert variables[var]["datasource"]["uid"] == "${datasource}"
        assert '$job' in variables["instance"]["definition"], "instance must be narrowed by job"


def test_training_dashboard_shows_the_article_panels() -> None:
    board = load("verl-training.json")
    assert board["title"] == "Verl PPO Training Dashboard"
    by_title = {p["title"]: p for p in lint.panels(board)}
    exprs = {t["expr"] for p in by_title.values() for t in p["targets"]}

    heatmap = by_title["KL divergence per layer"]
    assert heatmap["type"] == "heatmap" and heatmap["options"]["calculate"] is False
    assert heatmap["targets"][0]["legendFormat"] == "{{layer}}"
    assert "verl_layer_kl" in heatmap["targets"][0]["expr"]

    breakdown = by_title["Step time by stage"]
    assert breakdown["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    assert breakdown["targets"][0]["expr"].startswith("sum by (stage) (verl_stage_seconds")
    assert len(STAGES) == 10  # the breakdown shows whatever stages the trainer labels; 10 in the catalogue

    std = by_title["Reward std (0.8 threshold)"]
    steps = std["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert {"color": "red", "value": 0.8} in steps
    assert std["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off"

    slope = by_title["GPU memory growth slope"]
    assert "deriv30m" in slope["targets"][0]["expr"]
    assert {"color": "red", "value": 10} in slope["fieldConfig"]["defaults"]["thresholds"]["steps"]

    for needle in ("verl_actor_tokens_per_second", "verl_rollout_buffer_size", "verl_rollout_buffer_age_seconds",
                   "verl_reward_model_circuit_state", "verl_rollout_samples_dropped_total",
                   "verl_checkpoint_last_success_timestamp_seconds", "verl_monitor_alerts_firing", "ALERTS{"):
        assert any(needle in e for e in exprs), needle


def test_every_catalogue_metric_is_on_a_dashboard_or_rule() -> None:
    used: set[str] = set()
    for name in DASHBOARDS:
        for panel in lint.panels(load(name)):
            used |= {m for t in panel["targets"] for m in lint.metric_names(t["expr"])}
    for expr in lint.recording_rules().values():
        used |= lint.metric_names(expr)
    assert [m.name for m in CATALOG if m.name not in used] == []


def test_dcgm_field_list_covers_the_sample_exporter_output() -> None:
    """Every field the shipped dcgm-exporter sample exposes is in the field list the linter trusts."""
    sample = ROOT.parent / "shared/fixtures/dcgm-exporter-sample.prom"
    fields = lint.dcgm_fields()
    assert (ROOT / "dashboards/dcgm-fields.csv").read_text().startswith("# source:")
    if sample.exists():
        exposed = {ln.split("{")[0] for ln in sample.read_text().splitlines() if ln.startswith("DCGM_FI_")}
        assert exposed and exposed <= fields


def test_provisioning_points_at_the_dashboards() -> None:
    prov = ROOT / "dashboards/provisioning"
    datasources = yaml.safe_load((prov / "datasources/verl-prometheus.yaml").read_text())
    assert datasources["apiVersion"] == 1
    assert datasources["datasources"][0]["type"] == "prometheus"
    providers = yaml.safe_load((prov / "dashboards/verl.yaml").read_text())["providers"]
    assert providers[0]["type"] == "file" and providers[0]["options"]["path"]
    uids = [load(n)["uid"] for n in DASHBOARDS]
    assert len(set(uids)) == len(uids)


def test_readme_describes_every_panel() -> None:
    readme = (ROOT / "dashboards/README.md").read_text(encoding="utf-8")
    missing = [f"{name}: {p['title']}" for name in DASHBOARDS for p in lint.panels(load(name))
               if f"| {p['title']} ({p['type']}) |" not in readme]
    assert missing == [], "regenerate the panel tables in dashboards/README.md"


@pytest.mark.parametrize("argv", [
    ["-m", "dashboards.gen.lint", "does-not-exist.json"],
    ["-m", "dashboards.gen.lint", "pyproject.toml"],
    ["-m", "dashboards.gen", "--out", "does-not-exist"],
])
def test_tools_reject_bad_input_in_one_line(argv: list[str]) -> None:
    result = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert argv[-1] in result.stderr


def test_lint_tool_flags_a_broken_export(tmp_path: Path) -> None:
    board = load("monitor.json")
    board["panels"][1]["fieldConfig"]["defaults"]["unit"] = ""
    path = tmp_path / "exported.json"
    path.write_text(json.dumps(board))
    result = subprocess.run([sys.executable, "-m", "dashboards.gen.lint", str(path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "no unit" in result.stdout


def test_training_dashboard_has_the_rollout_server_and_cluster_rows() -> None:
    """Issue 33: a rollout-servers row (vLLM current and deprecated names, SGLang) and a cluster row (Ray,
    host memory), on names that exist in the peers' own output (tests/fixtures)."""
    board = load("verl-training.json")
    rows: dict[str, list[dict]] = {}
    current = ""
    for panel in board["panels"]:
        if panel["type"] == "row":
            current = panel["title"]
            rows[current] = list(panel.get("panels", []))
        else:
            rows.setdefault(current, []).append(panel)
    exprs = {title: " ".join(t["expr"] for p in panels for t in p["targets"]) for title, panels in rows.items()}
    rollout, cluster = exprs["Rollout servers (vLLM, SGLang)"], exprs["Cluster (Ray, host memory)"]
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total",
                 "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:num_running_reqs",
                 "sglang:num_queue_reqs", "sglang:gen_throughput", "sglang:token_usage"):
        assert name in rollout, name
    for name in ("node_memory_MemAvailable_bytes", "ray_node_mem_available", "ray_object_store_used_memory",
                 "ray_gcs_actors_count"):
        assert name in cluster, name
    fixtures = " ".join(p.read_text() for p in (ROOT / "tests/fixtures").glob("*.prom"))
    missing = sorted(n for n in lint.peer_metrics() if f"\n{n}{{" not in fixtures and f"\n{n} " not in fixtures)
    assert missing == [], f"peer-metrics.csv names no fixture shows: {missing}"
