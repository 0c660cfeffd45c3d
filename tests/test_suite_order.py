"""tests/conftest.py's hand-out order: the listed long files exist and come first, longest first."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONG_FILES, file_rank

ROOT = Path(__file__).resolve().parent.parent


def test_every_listed_long_file_exists_once() -> None:
    # a renamed or deleted file would silently drop out of the order and fall back to the end of the run
    assert [f for f in LONG_FILES if not (ROOT / f).is_file()] == []
    assert len(set(LONG_FILES)) == len(LONG_FILES)


def test_listed_files_rank_first_in_list_order_and_the_rest_keep_theirs() -> None:
    ids = ["tests/alerting/test_dispatch.py::test_a", "tests/e2e/test_demo_smoke.py::test_b",
           "tests/monitor/test_hang.py::test_c", "tests/e2e/test_ha_pair.py::test_d",
           "tests/e2e/test_demo_smoke.py::test_e"]
    assert sorted(ids, key=file_rank) == [
        "tests/e2e/test_ha_pair.py::test_d", "tests/e2e/test_demo_smoke.py::test_b",
        "tests/e2e/test_demo_smoke.py::test_e", "tests/alerting/test_dispatch.py::test_a",
        "tests/monitor/test_hang.py::test_c"]
