"""Each verl stage timer's share of its step (``timing_s/<stage>`` / ``timing_s/step``), for StageSlowdown.

A stage judged on its seconds pages whenever the whole step changes pace (longer responses, a run moved
to other nodes: every stage scales together); its share of the step moves only when that stage slows
against the others -- a weight sync 2.7 -> 21.5 s in a 60-s step goes from 4 % to 26 %. Validation and
checkpoint saves run every ``test_freq``/``save_freq`` steps and have their own rules; ``step`` is the whole.
"""

from __future__ import annotations

from monitor.model import Sample, with_node
from monitor.sources.verl_keys import STAGE_MAP, finite_number

STAGE_SHARE = "verl_jsonl_stage_share"
_NOT_STAGES = ("step", "testing", "save_checkpoint", "start_profile", "stop_profile")


def stage_shares(data: dict, labels: dict[str, str], node: str | None, t: float) -> list[Sample]:
    step = finite_number(data.get("timing_s/step"))
    if step is None or step <= 0:
        return []
    out = []
    for key, raw in data.items():
        if not key.startswith("timing_s/") or "/" in key[len("timing_s/"):]:
            continue
        stage = key[len("timing_s/"):]
        seconds = finite_number(raw)
        if stage in _NOT_STAGES or seconds is None or seconds < 0:
            continue
        out.append(Sample(STAGE_SHARE, with_node({**labels, "stage": STAGE_MAP.get(stage, stage)}, node),
                          seconds / step, t))
    return out
