"""verl_reward_shift_ks_pvalue: the first report (its window is the reference) is p = 1 without importing
scipy.stats; a later, shifted window gets scipy's own two-sample KS p-value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# a fresh interpreter: the suite's worker may have imported scipy.stats already
SCRIPT = """
import json, sys
from verl.metrics.data_quality import DataQualityAnalyzer
from verl.metrics.registry import MetricsRegistry

reg = MetricsRegistry()
get = lambda: reg.registry.get_sample_value("verl_reward_shift_ks_pvalue")
reg["verl_reward_shift_ks_pvalue"].set(0.25)  # a stale value the first report must replace
analyzer = DataQualityAnalyzer(reg, prompt_analysis="lexical")
first = [0.1 * (i % 5) for i in range(16)]
analyzer.observe(["Q: a"] * 16, first, [])
analyzer.report().result()
out = {"first": get(), "scipy_after_first": "scipy.stats" in sys.modules}
shifted = [0.9 + 0.01 * i for i in range(16)]
analyzer.observe(["Q: b"] * 16, shifted, [])
analyzer.report().result()
from scipy.stats import ks_2samp
out["second"], out["scipy_p"] = get(), float(ks_2samp(first, first + shifted).pvalue)
print(json.dumps(out))
"""


def test_first_report_is_p_1_without_scipy_then_a_shift_is_scipys_p_value() -> None:
    import json

    run = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["first"] == 1.0 and out["scipy_after_first"] is False, out
    assert out["second"] == out["scipy_p"] < 0.01, out
