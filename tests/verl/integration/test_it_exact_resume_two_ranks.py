"""kill -9 exactness on 2 ranks (torchrun, gloo): the chain of test_it_exact_resume.py (three SIGKILLs,
each resumed) ends with the digest of an uninterrupted run; a file of its own so the 1-rank and 2-rank
chains run on two workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.verl.integration.exact_resume_chain import run_chain

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


@pytest.mark.slow
def test_three_kills_two_ranks_resume_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_chain(2, tmp_path, capsys)
