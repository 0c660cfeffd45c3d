"""Diagnosis records (``Case``, ``PathFinding``, ``Diagnosis``) and the helpers the decision procedures in
``alerting/procedures.py`` share.

A correlation rule names its procedures (``diagnose: [reward_model, kl_coef, ...]``). When alerts that
belong to the rule fire, each procedure whose trigger alert is present reads what it needs through an
``EvidenceReader`` (the ``Evidence`` the monitor captured and handed forward) and the live ``verl_config_info`` labels, and returns a
``PathFinding``: whether it *measured* a cause, root-cause and suggestion sentences that each cite the value
and its source ("kl_coef = 0.0 since step 1200 (verl_kl_coef; config says 0.2)"), the facts it checked
that rule a cause out, and what evidence was missing. A cause that was not measured is never stated.

"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone

from alerting import vocabulary
from alerting.evidence import Evidence, EvidenceReader, Reading
from alerting.model import Alert

# Every config key a diagnosis reads -> its verl_config_info label. How a key is *printed* is the
# vocabulary's business (``alerting/vocabulary.py``): our spelling for our trainer, verl's for a verl run.
CONFIG_LABELS: dict[str, str] = {
    "kl_coef": "kl_coef",
    "rollout_worker_num": "rollout_worker_num",
    "rollout_buffer_max_size": "rollout_buffer_max_size",
    "rollout_buffer_eviction_policy": "rollout_buffer_eviction_policy",
    "data.num_workers": "data_num_workers",
    "data.persistent_workers": "data_persistent_workers",
    "data.pin_memory": "data_pin_memory",
    "data.prompt_dataset": "data_prompt_dataset",
    "reward.path": "reward_path",
    "reward_batch_size": "reward_batch_size",
}
CONFIG_SOURCE = "verl_config_info"


def fmt(v: float) -> str:
    """Values as an operator reads them: integers without decimals, else 4 significant digits."""
    if not math.isfinite(v):
        return str(v)
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}"


def coef(v: float) -> str:
    """A coefficient as its config spells it: 0.0, 0.2 (never a bare 0)."""
    return "0.0" if v == 0 else (f"{v:.1f}" if float(v).is_integer() else fmt(v))


def when(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%H:%M:%S UTC")


@dataclass
class Case:
    """What a procedure sees: the firing member alerts, live config labels and the evidence reader."""

    members: list[Alert]
    config: dict[str, str] = field(default_factory=dict)
    evidence: EvidenceReader = field(default_factory=Evidence)

    @property
    def names(self) -> set[str]:
        return {a.name for a in self.members}

    def member(self, name: str) -> Alert | None:
        return next((a for a in self.members if a.name == name), None)

    def node(self, name: str | None = None) -> str | None:
        for a in self.members:
            if (name is None or a.name == name) and a.labels.get("node"):
                return a.labels["node"]
        return None

    @property
    def since(self) -> float:
        """When the earliest member's condition began (the fault is at or before this)."""
        starts = [a.starts_at for a in self.members if a.starts_at]
        return min(starts) if starts else self.evidence.now()

    @property
    def dialect(self) -> str:
        """``verl`` when the run reports through volcengine verl (the monitor marks its config labels)."""
        return vocabulary.VERL if self.config.get("trainer") == "verl" else vocabulary.OURS

    def key(self, name: str) -> str:
        """A config key as this run's user writes it (verl's key names for a verl run)."""
        return vocabulary.key(name, self.dialect)

    def cfg(self, name: str) -> str | None:
        """A live config value from verl_config_info, None when not reported."""
        v = self.config.get(CONFIG_LABELS[name])
        return None if v in (None, "", "None") else str(v)

    def cfg_num(self, name: str) -> float | None:
        v = self.cfg(name)
        try:
            return None if v is None else float(v)
        except ValueError:
            return None

    def step_at(self, t: float, node: str | None) -> int | None:
        r = self.evidence.at("verl_global_step", t, node)
        return int(r.value) if r is not None else None

    def since_text(self, r: Reading, node: str | None) -> str:
        step = self.step_at(r.t, node)
        return f"since step {step}" if step is not None else f"since {when(r.t)}"


@dataclass
class PathFinding:
    path: str
    cause: bool  # a cause was measured (not merely suspected)
    summary: str = ""
    root_cause: list[str] = field(default_factory=list)
    suggestion: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # measured facts that rule a cause out
    missing: list[str] = field(default_factory=list)  # evidence that was not there


@dataclass
class Diagnosis:
    findings: list[PathFinding]

    @property
    def cause(self) -> bool:
        return any(f.cause for f in self.findings)

    @property
    def causes(self) -> list[PathFinding]:
        return [f for f in self.findings if f.cause]

    @property
    def summary(self) -> str:
        return "; ".join(f.summary for f in self.causes if f.summary)

    @property
    def root_cause(self) -> str:
        if self.cause:
            return "; ".join(s for f in self.causes for s in f.root_cause)
        notes = [s for f in self.findings for s in f.checked + f.missing]
        return "Not determined from the evidence: " + "; ".join(notes) if notes else ""

    @property
    def suggestion(self) -> str:
        return "; ".join(s for f in (self.causes or self.findings) for s in f.suggestion)

    @property
    def evidence_notes(self) -> str:
        """What was checked and what was missing, for the annotations (and the curious operator)."""
        return "; ".join(s for f in self.findings for s in f.checked + f.missing)

    def annotations(self) -> dict[str, str]:
        out = {"root_cause": self.root_cause, "suggestion": self.suggestion,
               "diagnosis": ",".join(f.path for f in self.causes) or "undetermined"}
        if self.summary:
            out["summary"] = self.summary
        if self.evidence_notes:
            out["evidence"] = self.evidence_notes
        return {k: v for k, v in out.items() if v}
