"""StragglerRank on a real torchrun run: paging delay of a slow rank, and the noise floor of a healthy run.

    .venv/bin/python benchmarks/straggler_paging.py --slow-rank 0 --stage reward --slow-s 0.6 --json
    .venv/bin/python benchmarks/straggler_paging.py --healthy-s 300 --ranks 2 --json

N ranks (gloo, CPU, the tiny model); with ``--slow-rank`` that rank sleeps ``--slow-s`` inside ``--stage``
every step from step ``--from-step`` (``faults.slow_rank``; reward and the updates hold a collective,
rollout none). The monitor scrapes rank 0's /metrics every second; beside it this script scores every
scrape with the monitor's own scorer (``monitor.sources.stragglers``) to report the highest score each
(rank, stage) reached. Measured: from the scrape that first shows the slow step to the page (wall time and
steps), the page's text; on a healthy run, every StragglerRank alert seen pending or firing (polled every
0.5 s) and the highest straggler score of any rank (the noise floor; the threshold is 2).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import yaml  # noqa: E402

from benchmarks.blind import InProcess  # noqa: E402
from monitor.sources.prom_text import parse_exposition  # noqa: E402
from monitor.sources.stragglers import StragglerScores  # noqa: E402

ALERT = "StragglerRank"


def _alerts(url: str) -> list[dict]:
    return [a for a in httpx.get(f"{url}/api/v1/alerts", timeout=5).json()["data"]
            if a["labels"]["alertname"] == ALERT]


class Scorer:
    """The monitor's scorer over this script's own scrapes: the trainer's step and the highest scores."""

    def __init__(self, url: str) -> None:
        self.url, self.scores, self.step, self.steps_scored = url, StragglerScores(), None, 0
        self.top: dict[str, float] = {}
        self.top_step: dict[str, float | None] = {}  # the trainer's step when that highest score was seen

    def scrape(self) -> None:
        batch = parse_exposition(httpx.get(self.url, timeout=5).text, time.time(), "trainer", None, {})
        self.step = next((s.value for s in batch.samples if s.name == "verl_global_step"), self.step)
        n = len(batch.samples)
        self.scores.derive(batch)
        derived = [s for s in batch.samples[n:] if s.name == "verl_rank_straggler_score"]
        self.steps_scored += bool(derived)
        for s in derived:
            key = f"rank={s.labels['rank']} stage={s.labels['stage']}"
            if s.value > self.top.get(key, 0.0):
                self.top[key], self.top_step[key] = round(s.value, 2), self.step


def measure(tmp: Path, *, ranks: int = 2, slow_rank: int | None = 0, stage: str = "reward", slow_s: float = 0.6,
            from_step: int = 8, healthy_s: float = 0.0, page: bool = True, timeout: float = 240.0,
            scored_steps: int = 6, overrides: tuple[str, ...] = ()) -> dict[str, object]:
    """One run. ``page=False``: no monitor, stop after ``scored_steps`` scored steps from the onset.
    ``overrides``: more trainer config overrides (the tests turn off what they do not measure)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
           "-m", "verl.cli.train", "--config", "ppo_tiny", "--metrics-port", "0", "trainer.total_steps=100000",
           "data.batch_size=8", "actor.ppo_mini_batch_size=4", "critic.ppo_mini_batch_size=4", *overrides]
    if slow_rank is not None:
        cmd += [f"faults.slow_rank={slow_rank}", f"faults.slow_rank_stage={stage}",
                f"faults.slow_rank_seconds={slow_s}", f"faults.slow_rank_from_step={from_step}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    daemon = None
    out: dict[str, object] = {"ranks": ranks, "slow_rank": slow_rank, "stage": stage if slow_rank is not None else None,
                              "slow_s": slow_s if slow_rank is not None else 0.0}
    try:
        assert proc.stdout is not None
        url = next((ln.split()[1] for ln in proc.stdout if ln.startswith("metrics: ")), None)
        if url is None:
            raise SystemExit("error: the trainer printed no metrics URL")
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
        if page:
            cfg = {"listen": "127.0.0.1:0", "state_db": str(tmp / "state.db"), "eval_interval": "0.5s",
                   "reward_outliers": False, "console": False,
                   "targets": [{"name": "trainer", "url": url, "interval": "1s"}]}
            (tmp / "m.yaml").write_text(yaml.safe_dump(cfg))
            daemon = InProcess(tmp / "m.yaml")
        scorer = Scorer(url)
        onset_t = onset_step = onset_scored = None
        seen: dict[str, set[str]] = {}
        started = time.time()
        deadline = started + (healthy_s if slow_rank is None else timeout)
        while time.time() < deadline:
            scorer.scrape()
            if onset_t is None and scorer.step is not None and (slow_rank is None or scorer.step >= from_step):
                onset_t, onset_step, onset_scored = time.time(), scorer.step, scorer.steps_scored
            if daemon is not None:
                for a in _alerts(daemon.url):
                    key = f"rank={a['labels']['rank']} stage={a['labels']['stage']}"
                    seen.setdefault(key, set()).add(a["state"])
                    if slow_rank is not None and a["state"] == "firing" and onset_t is not None:
                        out["delay_s"] = round(time.time() - onset_t, 1)
                        out["delay_steps"] = (scorer.step or 0) - (onset_step or 0)
                        out["paged"] = f"{key} node={a['labels']['node']}"
                        out["summary"] = a["annotations"].get("summary")
                        deadline = 0.0
            elif onset_scored is not None and scorer.steps_scored - onset_scored >= scored_steps:
                break
            time.sleep(0.5)
        out["steps"] = scorer.step
        out["alerts_seen"] = {k: sorted(v) for k, v in seen.items()}
        out["top_scores"] = dict(sorted(scorer.top.items(), key=lambda kv: -kv[1])[:4])
        healthy = [v for k, v in scorer.top.items() if slow_rank is None or k != f"rank={slow_rank} stage={stage}"]
        out["noise_floor"] = max(healthy, default=None)  # the highest score of a rank/stage not slowed
        out["top_steps"] = {k: scorer.top_step.get(k) for k in out["top_scores"]}  # type: ignore[union-attr]
        out["run_s"] = round(time.time() - started, 1)
    finally:
        if daemon is not None:
            daemon.stop()
        if proc.poll() is None:
            # SIGTERM first: torchrun starts each worker in a session of its own, so only its agent (which
            # forwards the signal to them) can end them; a SIGKILL to its group would orphan both ranks
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2, help="torchrun ranks (gloo, CPU)")
    p.add_argument("--slow-rank", type=int, default=0, help="the rank that sleeps in --stage")
    p.add_argument("--stage", default="reward", help="the stage it sleeps in (reward holds a collective)")
    p.add_argument("--slow-s", type=float, default=0.6, help="seconds it sleeps each step")
    p.add_argument("--from-step", type=int, default=8, help="the first slow step (the onset)")
    p.add_argument("--healthy-s", type=float, default=0.0,
                   help="no slow rank: watch a healthy run this many seconds for any StragglerRank")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    if not 0 < args.slow_s <= 60:
        print("error: --slow-s must be between 0 and 60 seconds", file=sys.stderr)
        return 2
    if not 2 <= args.ranks <= 16 or not 0 <= args.slow_rank < args.ranks:
        print("error: --ranks must be 2-16 and --slow-rank one of them", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        if args.healthy_s > 0:
            result = measure(Path(tmp), ranks=args.ranks, slow_rank=None, healthy_s=args.healthy_s)
        else:
            result = measure(Path(tmp), ranks=args.ranks, slow_rank=args.slow_rank, stage=args.stage,
                             slow_s=args.slow_s, from_step=args.from_step)
    print(json.dumps(result) if args.json else "\n".join(f"{k:12s} {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
