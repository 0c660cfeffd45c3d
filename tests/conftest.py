"""How the suite is spread over pytest-xdist workers (``make test``: ``-n 4 --dist loadgroup``).

Most tests wait (on servers, subprocesses, simulated faults) rather than compute, so more workers than
cores pay off; two things decide the wall time then:

- the longest tests must start first, or one of them starting last is the tail: slow-marked tests are
  handed out before the others (a stable sort, so a module's order is kept within each part);
- a module-scoped fixture (one live trainer, one Prometheus stack) must run once, not once per worker
  that gets one of its tests: such a module's tests form one ``xdist_group`` and go to one worker.

Only in xdist workers: a plain ``pytest`` run keeps collection order untouched.
"""

from __future__ import annotations

import pytest


def _module_id(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _has_module_fixture(item: pytest.Item) -> bool:
    # pytest's own record of the fixtures an item uses (no public accessor for their scope)
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    module = _module_id(item)
    return any(d.scope == "module" and d.baseid == module
               for defs in info.name2fixturedefs.values() for d in defs)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return
    for item in items:
        if _has_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(_module_id(item)))
    items.sort(key=lambda it: 0 if it.get_closest_marker("slow") else 1)
