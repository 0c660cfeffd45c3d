"""Suite-wide scheduling: the longest test files are collected first, longest first.

`make test` runs pytest-xdist with ``--dist loadfile --no-loadscope-reorder``: a file's tests on one worker,
the files handed out in collection order (xdist's default order, most tests first, put the long one- and
two-test files -- live trainers killed and resumed, torchrun, the HA pair -- at the end, where one of them
started late set the end of the run: 2026-12-06, the HA pair's two files started at 688 s of 940 s, one
after the other on one worker, while the other three workers went idle). Started first, the long files
overlap the hundreds of short ones, which then fill the workers' gaps (benchmarks/RESULTS.md "Test suite").
"""

from __future__ import annotations

import pytest

# Each file's wall time in the suite on 2026-12-06 (`CPU_PROFILE=... -p benchmarks.suite_cpu`, then
# `benchmarks/suite_cpu.py --timeline`, at load ~8), longest first. The HA pair's two files lead: they mostly
# wait on Alertmanager's fixed timers, so a quiet machine does not shorten them as it does the CPU-bound rest,
# and as the first two they start on two workers at once.
LONG_FILES = (
    "tests/e2e/test_ha_pair.py",  # 195 s
    "tests/e2e/test_ha_pair_both_down.py",  # 57 s
    "tests/benchmarks/test_bench_verl_families.py",  # 167 s
    "tests/verl/integration/test_it_checkpoint_dir.py",  # 157 s
    "tests/monitor/test_monitor_stragglers.py",  # 143 s
    "tests/verl/integration/test_it_hot_standby.py",  # 136 s
    "tests/verl/integration/test_it_exact_resume.py",  # 113 s
    "tests/e2e/test_demo_smoke.py",  # 105 s
    "tests/verl/integration/test_it_rollout_workers.py",  # 97 s
    "tests/verl/integration/test_it_exact_resume_two_ranks.py",  # 89 s
    "tests/e2e/test_demo_diagnosis.py",  # 89 s
    "tests/verl/integration/test_it_memory_tier.py",  # 79 s
    "tests/verl/integration/test_it_fsdp.py",  # 79 s
    "tests/e2e/test_soak_smoke.py",  # 77 s
    "tests/monitor/test_ray_live.py",  # 76 s
    "tests/monitor/test_monitor_scenarios.py",  # 75 s
    "tests/verl/ft/test_ft_trainer_resume.py",  # 74 s
    "tests/prometheus/test_alertmanager_live.py",  # 74 s
    "tests/verl/test_training.py",  # 67 s
    "tests/benchmarks/test_bench_verl_runs_real.py",  # 64 s
    "tests/verl/ft/test_ft_checkpoint_dir.py",  # 53 s
    "tests/monitor/test_monitor_verl_cadence.py",  # 53 s
    "tests/monitor/test_monitor_diagnosis_replay.py",  # 45 s
    "tests/verl/integration/test_it_fault_paths.py",  # 41 s
)


def file_rank(nodeid: str) -> int:
    """A test's place in the hand-out order: its file's index in LONG_FILES, every other file after them."""
    path = nodeid.split("::")[0]
    return LONG_FILES.index(path) if path in LONG_FILES else len(LONG_FILES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # stable: the order within each file, and of the files not listed, is kept; every xdist worker sorts its
    # own identical collection the same way, as xdist requires
    items.sort(key=lambda item: file_rank(item.nodeid))
