"""Detector types by the name rules use (``detector: {type: ...}``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from monitor.detectors.anomaly import RareValueDetector
from monitor.detectors.base import Detector
from monitor.detectors.changepoint import LevelShiftDetector
from monitor.detectors.context import ContextAnomalyDetector
from monitor.detectors.drift import TrendDriftDetector
from monitor.detectors.events import CounterIncreaseDetector, CounterStallDetector, WindowDropDetector
from monitor.detectors.exhaustion import ExhaustionDetector
from monitor.detectors.hang import StepOverrunDetector
from monitor.detectors.ks import KSShiftDetector
from monitor.detectors.leak import LeakDetector
from monitor.detectors.reference import ReferenceRiseDetector
from monitor.detectors.run_reference import RunReferenceDetector
from monitor.detectors.staleness import StalenessDetector, ValueAgeDetector
from monitor.detectors.threshold import (
    BaselineRatioDetector,
    FluctuationDetector,
    SpikeFilter,
    ThresholdDetector,
)

DETECTORS: dict[str, Callable[..., Detector]] = {
    "threshold": ThresholdDetector,
    "fluctuation": FluctuationDetector,
    "baseline_ratio": BaselineRatioDetector,
    "counter_increase": CounterIncreaseDetector,
    "window_drop": WindowDropDetector,
    "value_age": ValueAgeDetector,
    "staleness": StalenessDetector,
    "drift": TrendDriftDetector,
    "leak": LeakDetector,
    "ks_shift": KSShiftDetector,
    "level_shift": LevelShiftDetector,
    "rare_value": RareValueDetector,
    "context_anomaly": ContextAnomalyDetector,
    "counter_stall": CounterStallDetector,
    "exhaustion": ExhaustionDetector,
    "step_overrun": StepOverrunDetector,
    "run_reference": RunReferenceDetector,
    "reference_rise": ReferenceRiseDetector,
}


def accepted_params(kind: str) -> set[str]:
    return set(inspect.signature(DETECTORS[kind]).parameters) - {"self"}


def default_param(kind: str, name: str) -> Any:
    return inspect.signature(DETECTORS[kind]).parameters[name].default


def build(kind: str, params: dict[str, Any], spike_filter: int = 0) -> Detector:
    det = DETECTORS[kind](**params)
    return SpikeFilter(det, spike_filter) if spike_filter > 1 else det
