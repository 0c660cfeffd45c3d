"""The daemon freezes its long-lived objects out of the collector's walks once the store has grown; a
garbage cycle alive at that moment must still be freed, not frozen with them for the rest of the run."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

from monitor.daemon import Daemon


class _Batch:
    """Stands for a scrape's parsed batch held by a cycle (an exception's traceback, say)."""

    def __init__(self) -> None:
        self.me = self


def test_a_garbage_cycle_at_freeze_time_is_freed() -> None:
    host = SimpleNamespace(pipeline=SimpleNamespace(store=[object()] * 3), _frozen_at=0)
    batch = _Batch()
    gone = weakref.ref(batch)
    del batch  # unreachable now, but only the cycle collector can free it
    try:
        Daemon._freeze_if_grown(host)  # type: ignore[arg-type]
        gc.collect()
        assert gone() is None, "a garbage cycle was frozen: it would stay in memory for the whole run"
        assert host._frozen_at == 3
    finally:
        gc.unfreeze()
