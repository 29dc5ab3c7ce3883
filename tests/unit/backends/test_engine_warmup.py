"""The engine's warm-up and the collector: pauses timed, the warm heap frozen, the collector paused
inside the warm-up and on again however it ends."""

from __future__ import annotations

import pytest

from tests.engine_helpers import (
    make_engine,
)


def test_gc_pauses_are_timed_and_the_warm_heap_is_frozen():
    import gc

    from loadtest.core.heap import GcPauses, process_gc_pauses, settle_heap

    callbacks = len(gc.callbacks)
    assert (
        process_gc_pauses() is process_gc_pauses()
    )  # one callback per process, however many engines
    assert len(gc.callbacks) <= callbacks + 1
    pauses = GcPauses()
    gc.disable()  # only the collections this test makes
    try:
        gc.collect()
        gc.collect()
        got = pauses.summary(reset=True)
        assert (
            got["collections"] >= 2 and got["total_ms"] > 0 and 0 < got["max_ms"] <= got["total_ms"]
        )
        assert pauses.summary(reset=False)["collections"] == 0
        settle_heap()
        assert gc.get_freeze_count() > 0
    finally:
        gc.callbacks.remove(pauses._on_gc)
        gc.unfreeze()
        gc.enable()


def test_the_collector_is_paused_inside_and_on_again_after_however_the_phase_ends():
    import gc

    from loadtest.core.heap import collector_paused

    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), collector_paused():
        raise KeyError("the phase failed")
    assert gc.isenabled()
    gc.disable()  # paused by someone else already: left as found
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.integration
def test_the_warm_up_runs_with_the_collector_paused_and_counts_its_one_collection(
    tiny_model_dir, monkeypatch
):
    import gc
    import weakref

    eng, out = make_engine(tiny_model_dir)
    seen, garbage = [], []

    class Node:
        pass

    def warm(shapes):
        seen.append(gc.isenabled())
        for _ in range(1000):  # cyclic garbage, as a compile leaves
            n = Node()
            n.me = n
            garbage.append(weakref.ref(n))

    monkeypatch.setattr(eng.warmup, "shapes", warm)
    eng.warmup.run([(2, 4, 3)])
    assert seen == [False] and gc.isenabled()
    assert all(r() is None for r in garbage)  # collected at the warm-up's end
    kind, warmup_s, details = out.msgs[-1]
    assert kind == "warmed" and 0 <= details["gc_s"] <= warmup_s
    assert eng.gc.summary(reset=False)["collections"] == 0  # none of it charged to the run

    def fail(shapes):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(eng.warmup, "shapes", fail)
    sent = len(out.msgs)
    with pytest.raises(RuntimeError):
        eng.warmup.run([(2, 4, 3)])
    assert gc.isenabled() and len(out.msgs) == sent  # on again; no warm-up told
