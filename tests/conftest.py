"""Suite-wide scheduling: the files that hold slow tests are collected first.

`make test` runs pytest-xdist with ``--dist loadfile`` (a file's tests on one worker, in collection order of
the files). The slowest files -- live trainers killed and resumed, torchrun, a real Ray -- took 1.5-3 min each
and, collected last (``tests/verl/integration`` sorts late), ran alone at the end while the other workers
were idle. Started first, they overlap the hundreds of quick files instead."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> tuple[bool, bool]:
        path = item.nodeid.split("::")[0]
        # the trainer's kill-and-resume integration files are the longest of the slow ones (2-5 min each)
        return path not in slow_files, "/integration/" not in path

    items.sort(key=rank)  # stable: the order within each file and each rank is kept
