"""The daemon's verl JSONL wiring: offsets kept next to the state DB across a restart, the mapped series
re-exported on /metrics, jsonl options validated; rl_insight gauges renamed on ingest; huge numbers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
import yaml
from monitor_http import RunningDaemon, metric, wait_for

from alerting.clock import SimulatedClock
from benchmarks.verl_runs import RunSpec, encode, generate
from monitor.config import MonitorConfigError, load_config
from monitor.evaluation.rules import load_rule_files
from monitor.model import Sample, SourceBatch
from monitor.pipeline import Pipeline
from monitor.sources.relabel import relabel
from monitor.sources.verl_jsonl import JsonlTail


def _config(tmp: Path, log: Path, **jsonl: object) -> Path:
    cfg = {"listen": "127.0.0.1:0", "state_db": str(tmp / "state" / "state.db"), "eval_interval": "0.1s",
           "jsonl": [{"path": str(log), "node": "gpu-08", **jsonl}]}
    path = tmp / "monitor.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_daemon_reexports_verl_series_and_keeps_its_offset(tmp_path: Path) -> None:
    log = tmp_path / "exp.jsonl"
    records, _ = generate(RunSpec(version="0.8", algo="grpo", steps=6, step_s=30.0))
    log.write_bytes(b"".join(encode(r, "0.8") for r in records[:4]))
    d = RunningDaemon(_config(tmp_path, log, export=True, total_steps=6))
    try:
        assert wait_for(lambda: metric(d.url, "verl_global_step", node="gpu-08") == 4, timeout=15)
        assert metric(d.url, "verl_kl_divergence", source="kl_loss", node="gpu-08") is not None
        assert metric(d.url, "verl_monitor_samples_ingested_total", source="jsonl:exp.jsonl") > 100
        # /api/v1/rules says how a verl log is judged: in steps, with warm-ups in steps
        rules = httpx.get(f"{d.url}/api/v1/rules").json()["data"]
        kl = next(r for r in rules if r["alert"] == "KLDriftDetected" and r["conditions"][0]["per_step"])
        assert kl["conditions"][0]["judged_in"] == "steps" and kl["conditions"][0]["steps"]["window"] == 60
        assert kl["keep_firing_for_steps"] == 10
        cliff = next(r for r in rules if r["conditions"][0]["detector"] == "level_shift" and r["conditions"][0]["per_step"])
        assert cliff["conditions"][0]["steps"]["warmup_s"] == 2
    finally:
        d.stop()
    offsets = json.loads((tmp_path / "state" / "jsonl-offsets.json").read_text())
    assert next(iter(offsets.values()))["offset"] == log.stat().st_size
    with log.open("ab") as fh:
        fh.write(b"".join(encode(r, "0.8") for r in records[4:]))
    d = RunningDaemon(_config(tmp_path, log, export=True, total_steps=6))
    try:  # the restarted daemon reads the two new records after the four before its offset, once each
        # (those four are the detectors' history, issue 22: no blind window after a restart)
        assert wait_for(lambda: metric(d.url, "verl_global_step", node="gpu-08") == 6, timeout=15)
        samples = metric(d.url, "verl_monitor_samples_ingested_total", source="jsonl:exp.jsonl") or 0
        assert 4 * len(records[0]["data"]) < samples < 7 * len(records[0]["data"])
    finally:
        d.stop()


@pytest.mark.parametrize(("option", "message"), [
    ({"total_steps": 0}, "total_steps"), ({"down_after": "soon"}, "down_after"),
    ({"down_after_steps": 0}, "down_after_steps"), ({"export": "yes"}, "export"), ({"bogus": 1}, "bogus")])
def test_jsonl_options_are_validated(tmp_path: Path, option: dict, message: str) -> None:
    with pytest.raises(MonitorConfigError, match=message):
        load_config(_config(tmp_path, tmp_path / "x.jsonl", **option))


def test_rl_insight_gauges_are_renamed_on_ingest_and_speak_verl() -> None:
    pipe = Pipeline(load_rule_files(None), SimulatedClock(0.0))
    labels = {"project": "p", "experiment_name": "e", "node": "gpu-01"}
    batch = SourceBatch("trainer", [Sample("rl_insight_monitor_actor_kl_loss", labels, 0.01, 10.0),
                                    Sample("rl_insight_monitor_actor_perf_max_memory_allocated_gb", labels, 40.0, 10.0)])
    nodes = relabel(batch)  # the source edge; the daemon hands the nodes on with the round
    assert nodes == {"gpu-01"}
    pipe.verl_nodes |= nodes
    pipe.ingest(batch.samples)
    names = {(s.name, s.labels.get("source"), s.labels.get("stat")) for s in pipe.store}
    assert names == {("verl_kl_divergence", "kl_loss", None), ("verl_gpu_memory_used_bytes", None, "peak")}
    assert next(s for s in pipe.store if s.name == "verl_gpu_memory_used_bytes").last_v == 40.0 * 2**30
    assert pipe.vocabulary("gpu-01").dialect == "verl" and pipe.vocabulary("other").dialect == "verl-ops"
    pipe.close()


def test_a_scraped_rl_insight_gauge_arrives_renamed_and_its_node_speaks_verl(tmp_path: Path) -> None:
    import asyncio

    from monitor.daemon import Daemon
    from monitor.sources.prom_text import Target
    from monitor.sources.scrape import ScrapeSource

    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"listen": "127.0.0.1:0", "state_db": str(tmp_path / "s.db"),
                                                    "reward_outliers": False}))
    d = Daemon(load_config(tmp_path / "m.yaml"))
    body = 'rl_insight_monitor_actor_kl_loss{project="p"} 0.01\n'
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=body))

    async def one_round() -> None:
        async with httpx.AsyncClient(transport=transport) as client:
            src = ScrapeSource(Target("trainer", "http://127.0.0.1:9/metrics", node="gpu-01"), client)
            d._file_round(src, await src.poll(d.clock))
    try:
        asyncio.run(one_round())
        assert {s.name for s in d.pipeline.store} == {"verl_kl_divergence", "up"}
        assert d.pipeline.vocabulary("gpu-01").dialect == "verl"
    finally:
        d.close()


def test_huge_numbers_and_garbage_never_end_the_tail(tmp_path: Path) -> None:
    f = tmp_path / "exp.jsonl"
    f.write_text('{"step": 1, "data": {"actor/pg_loss": ' + "9" * 400 + ', "timing_s/step": 1e400}}\n'
                 '[1, 2]\n"text"\n{"step": 2, "data": {"actor/pg_loss": 0.5}}\n' + "{" * 5000 + "\n")
    os.utime(f, (500.0, 500.0))
    batch = JsonlTail(f, "n").poll(1000.0)
    assert [s.value for s in batch.samples if s.name == "verl_global_step"] == [1, 2]
    assert batch.errors == {"nonfinite_value": 2, "malformed_json": 3}  # 400 digits and 1e400 (inf)


def test_resolved_config_feeds_config_info_and_total_steps(tmp_path: Path) -> None:
    f, cfg = tmp_path / "exp.jsonl", tmp_path / "config.yaml"
    f.write_bytes(b"".join(encode(r, "0.8") for r in generate(RunSpec(version="0.8", steps=3))[0]))
    cfg.write_text(yaml.safe_dump({  # the keys as verl's _generated_ppo_trainer.yaml nests them
        "algorithm": {"use_kl_in_reward": False, "kl_ctrl": {"kl_coef": 0.001}},
        "actor_rollout_ref": {"actor": {"use_kl_loss": True, "kl_loss_coef": 0.0, "optim": {"lr": 1e-6}},
                              "model": {"path": "Qwen/Qwen2.5-7B"}, "rollout": {"agent": {"num_workers": 8}}},
        "data": {"dataloader_num_workers": 0, "train_batch_size": 1024},
        "reward_model": {"micro_batch_size_per_gpu": 16, "model": {"fsdp_config": {"param_offload": False}}},
        "trainer": {"total_training_steps": 3}}))
    tail = JsonlTail(f, "gpu-08", resolved_config=cfg)
    batch = tail.poll(1e10)
    info = [s.labels for s in batch.samples if s.name == "verl_config_info"]
    assert len(info) == 1 and info[0]["kl_coef"] == "0.0" and info[0]["data_num_workers"] == "0"
    assert info[0]["offload_reward_to_cpu"] == "false" and tail.liveness.total_steps == 3
    pipe = Pipeline(load_rule_files(None), SimulatedClock(0.0))
    pipe.ingest(batch.samples)
    vocab = pipe.vocabulary("gpu-08")
    assert vocab.describe("kl_coef").endswith("(verl default 0.001, now 0.0)")
    assert vocab.describe("data.num_workers") == "data.dataloader_num_workers (verl default 8, now 0)"
    assert [s.name for s in tail.poll(1e10 + 1).samples].count("verl_config_info") == 0  # unchanged file
    pipe.close()


def test_readme_setup_line_matches_the_sidecar_config() -> None:
    """The one-line setup of monitor/README.md: verl's FileLogger reads VERL_FILE_LOGGER_PATH
    (verl/utils/tracking.py) on the TaskRunner's node, which Ray's runtime_env reaches; the sidecar's
    jsonl path in the same section must be that file, and its options must load."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "monitor" / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## volcengine verl runs"):]
    line = re.search(r"trainer\.logger='\[(.*?)\]'.*?\n.*?runtime_env\.env_vars\.VERL_FILE_LOGGER_PATH=(\S+)", section)
    assert line is not None and '"file"' in line.group(1)
    sidecar = yaml.safe_load(re.search(r"```yaml\n(jsonl:.*?)```", section, re.S).group(1))  # type: ignore[union-attr]
    assert sidecar["jsonl"][0]["path"] == line.group(2)
    cfg = Path(os.environ.get("TMPDIR", "/tmp")) / f"verl-readme-{os.getpid()}.yaml"
    cfg.write_text(yaml.safe_dump({"jsonl": sidecar["jsonl"]}))
    try:
        j = load_config(cfg).jsonl[0]
    finally:
        cfg.unlink()
    assert (j.total_steps, j.down_after, j.down_after_steps, j.export) == (2000, 600.0, 3.0, True)
