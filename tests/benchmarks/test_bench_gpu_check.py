"""benchmarks/gpu_check.py where there is no GPU: every check says it is skipped and why, one JSON line each,
exit 0; a wrong check name is one line and exit 2. (Its checks themselves run on a lent GPU machine; their
output is in benchmarks/RESULTS.md.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here: the checks would run for minutes")
def test_without_a_gpu_every_check_is_skipped_with_the_reason(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(ln) for ln in proc.stdout.splitlines()]
    assert lines[0]["check"] == "device" and lines[0]["cuda"] is False
    assert lines[0]["torch"] == torch.__version__
    checks = lines[1:]
    assert [c["check"] for c in checks] == ["ppo_cuda_bf16", "fsdp_kill9_resume", "metrics_vs_nvml", "leak_paged",
                                            "vllm"]
    assert all(c["skipped"].startswith("no CUDA device") for c in checks)


def test_an_unknown_check_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--only", "ppo_cuda_bf16,warp_drive"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "'warp_drive'" in proc.stderr and "ppo_cuda_bf16" in proc.stderr
