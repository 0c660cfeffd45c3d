"""Alert instances as the evaluator holds them and tells them to the alert book: a ``Binding`` (a rule's
condition on one series, with its own detector), a ``Candidate`` (an instance that changed, as the book
reads it) and an ``Evaluation`` (one tick's word); what the annotate stage renders for one that starts
firing (``Annotated``) and the book's state of each (``AlertState``). The stages read these, never each
other."""

from __future__ import annotations

import math
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from alerting.model import Alert
from monitor.detectors.base import Detector, Finding
from monitor.evaluation.rules import Rule
from monitor.series.store import Series

NOT_CALM = -math.inf  # a binding's ``calm_until`` while the evaluator's tick must look at it
_NO_LABELS: dict[str, str] = {}  # every binding's labels until the evaluator's ``_identity`` replaces them (never mutated)


def _no_labels() -> dict[str, str]:
    return _NO_LABELS  # an empty dict each was 64 B x ~22 000 bindings at 1000 GPUs


@dataclass(eq=False, slots=True)  # one per (rule, series): ~22 000 at 1000 GPUs
class Binding:
    rule: Rule
    rule_index: int
    cond: int
    series: Series
    detector: Detector
    labels: dict[str, str] = field(default_factory=_no_labels)  # alert labels (primary bindings only)
    fp: str = ""
    active: bool = False
    since: float | None = None        # start of the current active run of this condition
    joint_since: float | None = None  # start of the run where all conditions held (compound)
    last_t: float = -math.inf
    finding: Finding | None = None
    hold_until: float = -math.inf  # keep_firing_for_steps: held active until this sample time
    samples: int = 0
    unfillable: str | None = None  # why its window cannot fill (said once)
    join: tuple[str, ...] = ()  # a primary's values of its rule's join_on labels (node by default)
    said: tuple[float, bool] | None = None  # (since, ready) as last given to the alert book; None: not given
    calm_until: float = NOT_CALM  # until then a given binding has nothing new to say (no flip, still fresh)
    hot_seq: int = 0  # when it last joined the hot bindings: their order, which the book's transitions keep
    parting: Finding | None = None  # a given binding's last active finding, once its condition cleared

    def record(self, f: Finding, t: float, at: float | None = None) -> None:
        """``at``: when the monitor saw the sample (a scrape's time); the run starts then, not at a
        target's own stamp, so a target clock an hour behind cannot make ``for:`` hold at once.
        Only an active finding is kept: nothing reads an inactive one (a candidate's details, a join's
        evidence and ``keep_firing_for_steps`` read active bindings only), and holding the last one of
        each of ~22 000 bindings at 1000 GPUs, with its details dict, was ~300 B apiece -- except the last
        one of a binding the book was given (``parting``): its alert resolves with that value."""
        if f.active:
            if not self.active:
                self.since = t if at is None else at
                self.calm_until, self.parting = NOT_CALM, None
            self.finding = f
        else:
            if self.active:
                self.calm_until = NOT_CALM
                if self.said is not None:
                    self.parting = self.finding
            self.since = self.finding = None
        self.active = f.active
        self.last_t = t


def binding_value(b: Binding) -> float | None:
    """What an alert of ``b`` reports as its value now: its detector's ``value``, else the series' last sample."""
    f = b.finding if b.finding is not None else b.parting
    value = f.details.get("value", b.series.last_v) if f is not None else b.series.last_v
    return None if value is None or not math.isfinite(value) else float(value)


@dataclass(frozen=True)
class Candidate:
    """An alert instance whose condition holds now."""

    fp: str
    labels: dict[str, str]
    rule: Rule
    since: float
    ready: bool  # held for the rule's ``for`` duration
    value: float | None
    details: dict[str, float]
    binding: Binding
    # the ``when:`` conditions' evidence, one per extra condition: the series that holds it (its name,
    # value and its detector's details), so a page can quote both sides of a join
    joined: tuple[dict, ...] = ()


@dataclass(frozen=True)
class Evaluation:
    """One tick's word to the alert book: ``candidates``, every binding of each alert instance that changed
    (a fingerprint's whole group, so the book can choose among them); ``held``, the fingerprints that hold
    now (changed or not); ``changed``, the fingerprints that changed. A fingerprint in neither of the first
    two no longer holds; one that has just stopped is among ``changed``."""

    candidates: list[Candidate]
    held: Mapping[str, Any]
    changed: Set[str]


@dataclass(frozen=True)
class Annotated:
    """What the annotate stage rendered for an alert that starts firing."""

    annotations: dict[str, str]
    plot_file: str = ""


@dataclass
class AlertState:
    """The alert book's state of one fingerprint: pending, firing, or resolved on its way out."""

    labels: dict[str, str]
    annotations: dict[str, str]
    status: str  # pending | firing | resolved
    starts_at: float
    ends_at: float | None = None
    value: float | None = None
    cleared_at: float | None = None  # first evaluation where the condition no longer held
    keep_firing_for: float = 0.0
    restored: bool = False
    generator_url: str = ""
    external: bool = False  # held firing by an alert that came through Alertmanager, until it resolves
    own_active: bool = False  # the monitor's own rules hold it (as of the last evaluation)
    plot_file: str = ""  # the PNG rendered when it started firing: travels with the alert
    # the binding whose value a firing alert reports while its own ready condition holds: read when asked,
    # not copied every tick (``value`` keeps the last one read once it stops holding)
    live: Binding | None = None
    seq: int = 0  # when its fingerprint entered the book: the order of the resolves one update writes

    def current_value(self) -> float | None:
        return binding_value(self.live) if self.live is not None else self.value

    def let_go(self) -> None:
        """Keep the value it has now; the binding stops speaking for it."""
        if self.live is not None:
            self.value, self.live = binding_value(self.live), None

    def to_alert(self) -> Alert:
        return Alert(labels=dict(self.labels), annotations=dict(self.annotations), starts_at=self.starts_at,
                     ends_at=self.ends_at, status="resolved" if self.status == "resolved" else "firing",
                     value=self.current_value(), generator_url=self.generator_url, plot_file=self.plot_file)
