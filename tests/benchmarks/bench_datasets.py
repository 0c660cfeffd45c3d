"""Where the tests find the NAB / TCPD datasets (not in the repository: benchmarks/DATASETS.md), and the
skip markers for tests that need them, with a reason that says how to get them."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks._common import DEFAULT_DATA

NAB = DEFAULT_DATA / "nab"
TCPD = DEFAULT_DATA / "tcpd"
_HOW = "not in the repository; set VERL_OPS_DATASETS=DIR or put it in ../shared/datasets, see benchmarks/DATASETS.md"


def needs(path: Path, name: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not path.is_dir(), reason=f"needs the {name} dataset at {path}: {_HOW}")
