"""The engine worker's messages: what the streamer reports per step, and how the outbox writes it."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
import torch

from loadtest.backends.transformers.outbox import Outbox
from loadtest.backends.transformers.stamping import StepStreamer
from loadtest.core.events import Finished, Tokens
from tests.engine_helpers import Inline, Recorder, compile_eagerly, input_shapes, make_engine


def _last_stamp(msg):
    return msg[1][-1] if msg[0] == "tokens" else msg[1]


def req(rid, cap, eos=None):
    return ("req", rid, [1, 2, 3], cap, eos is None, eos)


def test_streamer_reports_tokens_per_step_and_each_end_once():
    out, finished, cancelled = Recorder(), set(), set()
    s = StepStreamer([req(10, 2), req(11, 3, eos=7), req(12, 3)], out, cancelled, finished)
    s.put(torch.tensor([[1, 2, 3]] * 3))  # the prompt: no message
    assert out.msgs == []
    for tokens in ([5, 5, 5], [5, 7, 5], [5, 5, 5]):
        s.put(torch.tensor(tokens))
    kinds = [(m[0], m[2:]) for m in out.msgs]
    assert kinds == [
        ("tokens", ([10, 11, 12],)),
        ("tokens", ([10, 11, 12],)),
        ("done", (10, 2)),
        ("done", (11, 2)),  # row 10 at its cap, 11 at EOS
        ("tokens", ([12],)),
        ("done", (12, 3)),
    ]
    stamps = [_last_stamp(m) for m in out.msgs]
    assert stamps == sorted(stamps) and finished == {10, 11, 12}
    s.close_rest()  # nothing left: no second "done"
    assert len(out.msgs) == 6


def test_a_cancelled_row_gets_no_more_tokens_and_no_done():
    out, finished, cancelled = Recorder(), set(), set()
    s = StepStreamer([req(1, 3), req(2, 3)], out, cancelled, finished)
    s.put(torch.tensor([[0], [0]]))
    s.put(torch.tensor([4, 4]))
    cancelled.add(2)
    s.put(torch.tensor([4, 4]))
    s.put(torch.tensor([4, 4]))
    assert [m[2] for m in out.msgs if m[0] == "tokens"] == [[1, 2], [1], [1]]
    assert [m[2:] for m in out.msgs if m[0] == "done"] == [(1, 3)]
    s.close_rest()
    assert [m[2:] for m in out.msgs if m[0] == "done"] == [(1, 3)]


def test_close_rest_ends_rows_generate_stopped_early_with_their_count():
    out = Recorder()
    s = StepStreamer([req(1, 8), req(2, 8)], out, set(), set())
    s.put(torch.tensor([[0], [0]]))
    s.put(torch.tensor([4, 4]))
    s.close_rest()
    assert [m[2:] for m in out.msgs if m[0] == "done"] == [(1, 1), (2, 1)]


class WakeRecorder(Recorder):
    """Records, per step handed over, whether the writer was woken at once (``call``)."""

    def __init__(self) -> None:
        super().__init__()
        self.woken: list = []

    def defer(self, fn, *args) -> None:
        self.woken.append(False)
        super().defer(fn, *args)

    def call(self, fn, *args) -> None:
        self.woken.append(True)
        super().defer(fn, *args)


def test_the_writer_is_woken_at_once_for_a_step_where_a_row_ends():
    # Caps 2 and 4, and EOS 7 for the third row at step 3: only steps 2, 3 and 4 can end a row.
    # A closed-loop user waits on that row's "done"; other steps wait for the writer's period.
    out = WakeRecorder()
    s = StepStreamer([req(1, 2), req(2, 4), req(3, 4, eos=7)], out, set(), set())
    s.put(torch.tensor([[0], [0], [0]]))
    for tokens in ([5, 5, 5], [5, 5, 5], [5, 5, 7], [5, 5, 5]):
        s.put(torch.tensor(tokens))
    assert out.woken == [False, True, True, True]
    assert [m[2:] for m in out.msgs if m[0] == "done"] == [(1, 2), (3, 3), (2, 4)]


class GatedConn:
    """A pipe end whose first write blocks until released: later messages queue up meanwhile."""

    def __init__(self) -> None:
        self.sent: list = []
        self.release = threading.Event()
        self.first_write = threading.Event()

    def send(self, msg) -> None:
        if not self.sent:
            self.first_write.set()
            assert self.release.wait(10)
        self.sent.append(msg)


def test_outbox_keeps_order_and_coalesces_what_queued_during_a_write():
    conn = GatedConn()
    box = Outbox(conn)
    box.send(("a",))
    assert conn.first_write.wait(10)  # the writer is inside its first write
    for i in range(5):
        box.send(("b", i))
    conn.release.set()
    box.close()
    assert conn.sent == [("a",), ("many", [("b", 0), ("b", 1), ("b", 2), ("b", 3), ("b", 4)])]


def test_deferred_work_runs_on_the_writer_in_order_with_plain_messages():
    sent, threads = [], set()

    class Conn:
        def send(self, msg):
            sent.extend(msg[1] if msg[0] == "many" else [msg])

    def step(i):
        threads.add(threading.current_thread().name)
        return [("tokens", i)]

    box = Outbox(Conn(), period_s=0.001)
    box.send(("admitted",))
    for i in range(50):
        box.defer(step, i)
    box.call(lambda: [("done",)])
    box.flush()
    assert sent == [("admitted",)] + [("tokens", i) for i in range(50)] + [("done",)]
    assert threads == {"loadtest-outbox"}
    box.defer(step, 50)  # the writer sleeps now: a deferral wakes it
    box.flush(timeout=10)
    assert sent[-1] == ("tokens", 50)
    box.close()


@pytest.mark.integration
def test_a_failing_deferred_call_ends_the_worker_process(tmp_path):
    import subprocess
    import sys

    code = (
        "from loadtest.backends.transformers.outbox import Outbox\n"
        "import time\n"
        "class C:\n    def send(self, m): pass\n"
        "box = Outbox(C())\nbox.call(lambda: 1 / 0)\ntime.sleep(30)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 70 and "ZeroDivisionError" in p.stderr


def test_outbox_close_returns_when_the_parent_is_gone():
    class Broken:
        def send(self, msg):
            raise BrokenPipeError

    box = Outbox(Broken())
    box.send(("a",))
    box.close(timeout=10)
    assert not box._thread.is_alive()


def test_parent_unpacks_coalesced_messages_in_order():
    from loadtest.backends.transformers.backend import TransformersBackend

    async def go():
        b = TransformersBackend.__new__(TransformersBackend)
        b._queues = {1: asyncio.Queue(), 2: asyncio.Queue()}
        b._reply = asyncio.Queue()
        b._on_message(
            (
                "many",
                [
                    ("tokens", (100,), [1, 2]),
                    ("done", 100, 1, 1),
                    ("tokens", (200,), [2]),
                    ("done", 200, 2, 2),
                    ("warmed", 1.5, {"compile_s": 0.0, "gc_s": 0.0}),
                ],
            )
        )
        got = {rid: [q.get_nowait() for _ in range(q.qsize())] for rid, q in b._queues.items()}
        return got, b._reply.get_nowait()

    got, reply = asyncio.run(go())
    assert got[1] == [Tokens((100,)), Finished(100, 1)]
    assert got[2] == [Tokens((100,)), Tokens((200,)), Finished(200, 2)]
    assert reply == ("warmed", 1.5, {"compile_s": 0.0, "gc_s": 0.0})


@pytest.mark.parametrize("n", [1, 3])
def test_close_flushes_everything(n):
    got = []

    class Conn:
        def send(self, msg):
            got.extend(msg[1] if msg[0] == "many" else [msg])

    box = Outbox(Conn())
    for i in range(200 * n):
        box.send(("m", i))
    box.close()
    assert got == [("m", i) for i in range(200 * n)]


# -- stamp sources: after generate()'s own sync (default) and the streamer (fallback) ------------


def _shape(msgs):
    return [(m[0], *m[2:]) for m in msgs]


@pytest.mark.integration
def test_both_stamp_sources_report_the_same_tokens_and_ends(tiny_model_dir):
    from loadtest.backends.transformers.stamping import AFTER_SYNC, STREAMER

    eng, out = make_engine(tiny_model_dir)
    assert eng.stamp_source == AFTER_SYNC  # this transformers synchronises in its stop check
    ids = torch.tensor([[5, 6, 7, 8]])
    seq = eng.model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=6,
        min_new_tokens=6,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=None,
    )[0, 4:].tolist()
    eos = seq[2]
    first = seq.index(eos) + 1  # the row ends at the first occurrence of that token
    got = {}
    for source in (AFTER_SYNC, STREAMER):
        eng.stamp_source = source
        for batch in (
            [("req", 1, [5, 6, 7, 8], 6, True, None), ("req", 2, [9, 10], 3, True, None)],
            [("req", 3, [5, 6, 7, 8], 6, False, eos)],
        ):
            out.msgs.clear()
            assert eng._generate(batch, set(), out, set()) == 0  # one stamp per token
            got[source, batch[0][1]] = out.msgs[:]
    for rid in (1, 3):
        assert _shape(got[AFTER_SYNC, rid]) == _shape(got[STREAMER, rid])
    fixed = got[AFTER_SYNC, 1]
    assert _shape(fixed) == [("tokens", [1, 2])] * 3 + [("done", 2, 3)] + [("tokens", [1])] * 3 + [
        ("done", 1, 6)
    ]
    assert [_last_stamp(m) for m in fixed] == sorted(_last_stamp(m) for m in fixed)
    assert _shape(got[AFTER_SYNC, 3]) == [("tokens", [3])] * first + [("done", 3, first)]


@pytest.mark.integration
def test_stamp_source_falls_back_to_the_streamer_when_the_hook_cannot_be_trusted(
    tiny_model_dir, monkeypatch
):
    import transformers.generation.utils as gu

    from loadtest.backends.transformers import stamping as ew

    assert ew.choose_stamp_source(torch.device("cpu")) == ew.AFTER_SYNC
    with (
        monkeypatch.context() as m
    ):  # a loop with no StopCheck (transformers 4): its wait has no hook after it
        m.delattr(gu, "StopCheck")
        assert ew.choose_stamp_source(torch.device("cpu")) == ew.STREAMER

    if hasattr(gu, "DeferredStopCheck"):  # a stop check that does not wait for the step
        monkeypatch.setattr(
            gu.DeferredStopCheck, "is_supported", staticmethod(lambda *a, **k: True)
        )
        eng, _ = make_engine(tiny_model_dir)
        assert eng.stamp_source == ew.STREAMER
        monkeypatch.undo()
    eng, out = make_engine(tiny_model_dir)
    original = gu.StopCheck
    monkeypatch.setattr(ew.AfterSyncStamps, "stamp", lambda self, row: None)  # miscounts: no stamps
    eng._warmup([(2, 4, 3)])
    assert eng.stamp_source == ew.STREAMER and "miscounted" in eng.info["stamp_source"]
    assert out.msgs[-1][0] == "warmed"
    assert gu.StopCheck is original  # the stamping subclass is in place for one generate() only
    eng.stamp_source = ew.AFTER_SYNC

    def fails(**kwargs):
        assert gu.StopCheck is not original
        raise RuntimeError("boom")

    monkeypatch.setattr(eng.model, "generate", fails)
    with pytest.raises(RuntimeError):
        eng._generate([("req", 1, [5, 6], 3, True, None)], set(), out, set())
    assert gu.StopCheck is original  # ... even when it fails


def test_the_stamp_follows_the_stop_checks_wait_and_the_token_copy():
    """The stamping StopCheck queues the tokens' copy, lets the check wait for the step, then
    stamps; the check's answer is generate()'s, unchanged."""
    from loadtest.backends.transformers import stamping as ew

    order = []

    class Check:  # stands in for transformers' StopCheck: its bool() is the device wait
        def __call__(self, unfinished, tokens, length):
            order.append("wait")
            return length >= 3

    class Hook:
        def copy_tokens(self, tokens):
            order.append("copy")
            return tokens

        def stamp(self, row):
            order.append(("stamp", row))

    check = ew._stamping_stop_check(Check, Hook())()
    assert [check(None, t, n) for t, n in (("a", 2), ("b", 3))] == [False, True]
    assert order == ["copy", "wait", ("stamp", "a"), "copy", "wait", ("stamp", "b")]

    import transformers.generation.utils as gu

    original = gu.StopCheck
    streamer = StepStreamer([req(1, 4)], Recorder(), set(), set())
    hook = ew.AfterSyncStamps(torch, streamer)
    hook.install()
    assert gu.StopCheck is not original and issubclass(gu.StopCheck, original)
    hook.remove()
    assert gu.StopCheck is original


def test_steps_without_tokens_count_rows_and_honour_a_cancellation():
    """Fixed-length batches hand no tokens to the streamer (nothing to look at): rows end at their
    caps, a cancellation takes effect at the next step, done counts are the steps so far."""
    out, finished, cancelled = Recorder(), set(), {99}  # a stale cancellation from an earlier batch
    s = StepStreamer([req(1, 4), req(2, 2), req(3, 5)], out, cancelled, finished)
    s.start(0)
    for t in (10, 20):
        s.step(t, None)
    cancelled.add(3)
    for t in (30, 40, 50):
        s.step(t, None)
    s.close_rest()
    assert [(m[0], m[1], *m[2:]) for m in out.msgs] == [
        ("tokens", (10,), [1, 2, 3]),
        ("tokens", (20,), [1, 2, 3]),
        ("done", 20, 2, 2),
        ("tokens", (30,), [1]),
        ("tokens", (40,), [1]),
        ("done", 40, 1, 4),
    ]
    assert finished == {1, 2}


def test_roofline_accounting_from_step_stamps():
    from loadtest.backends.transformers.stamping import new_accounting

    acct, counting = new_accounting(), [True]
    s = StepStreamer(
        [("req", 1, [1, 2, 3], 4, True, None), ("req", 2, [1, 2, 3, 4, 5], 4, True, None)],
        Recorder(),
        set(),
        set(),
        width=5,
        accounting=lambda: acct if counting[0] else None,
    )
    s.start(0)
    for t_ms, on in (
        (10, True),
        (13, True),
        (16, False),
        (19, True),
    ):  # the third step under a profiler
        counting[0] = on
        s.step(t_ms * 1_000_000, None)
    assert acct["prefill_batches"] == 1 and acct["prefill_tokens"] == 8
    assert acct["prefill_attn_pairs"] == 3 * 4 // 2 + 5 * 6 // 2
    assert acct["prefill_s"] == pytest.approx(0.010)
    assert acct["decode_steps"] == 2 and acct["decode_rows"] == 4
    assert acct["decode_ctx_sum"] == 2 * (5 + 1) + 2 * (5 + 3)  # context = width + steps before
    assert acct["decode_s"] == pytest.approx(0.006)


class PeriodRecorder(Recorder):
    """An outbox whose writer runs deferred work only when woken (``call``) or at ``period()``."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list = []
        self.writes = 0

    def defer(self, fn, *args) -> None:
        self.pending.append((fn, args))

    def call(self, fn, *args) -> None:
        self.defer(fn, *args)
        self.period()

    def period(self) -> None:
        pending, self.pending = self.pending, []
        for fn, args in pending:
            self.msgs.extend(fn(*args) or ())
        self.writes += bool(pending)


def test_plain_steps_between_two_writes_are_one_message_and_accounted_as_if_one_by_one():
    from loadtest.backends.transformers.stamping import new_accounting

    acct, out = new_accounting(), PeriodRecorder()
    s = StepStreamer([req(1, 6), req(2, 4)], out, set(), set(), width=3, accounting=lambda: acct)
    s.start(0)
    for t in (10, 20, 30):  # the prefill (10), then two decode steps: nothing can end yet
        s.step(t, None)
    assert out.msgs == [] and len(out.pending) == 1  # one drain queued, not one per step
    out.period()
    # (the first step is looked at row by row: a request may have been cancelled before it)
    assert out.msgs == [("tokens", (10,), [1, 2]), ("tokens", (20, 30), [1, 2])]
    s.step(40, None)  # row 2 reaches its cap: the writer is woken at once
    assert out.msgs[2:] == [("tokens", (40,), [1, 2]), ("done", 40, 2, 4)]
    for t in (50, 60):
        s.step(t, None)  # 50 is plain; 60 ends row 1 and wakes the writer, which drains both
    assert out.msgs[4:] == [("tokens", (50,), [1]), ("tokens", (60,), [1]), ("done", 60, 1, 6)]
    assert out.writes == 3
    # hand-computed: prefill 10 ns; decode steps 2..6, each 10 ns, 2 rows, context 3 + steps before
    assert acct["prefill_batches"] == 1 and acct["prefill_s"] == pytest.approx(10e-9)
    assert acct["decode_steps"] == 5 and acct["decode_rows"] == 10
    assert acct["decode_ctx_sum"] == 2 * sum(3 + k for k in range(1, 6))
    assert acct["decode_s"] == pytest.approx(50e-9)


def test_a_step_counts_in_the_accounting_current_when_it_was_handed_over():
    """The window opens (a new accounting) while earlier steps still wait for the writer: they
    count in the old one, the later ones in the new, though one drain takes them all."""
    from loadtest.backends.transformers.stamping import new_accounting

    before, window, out = new_accounting(), new_accounting(), PeriodRecorder()
    current = [before]
    s = StepStreamer(
        [req(1, 6), req(2, 6)], out, set(), set(), width=3, accounting=lambda: current[0]
    )
    s.start(0)
    s.step(10, None)  # the prefill
    s.step(20, None)  # decode step 1 (context 3 + 1)
    current[0] = window
    s.step(30, None)  # decode steps 2 and 3 (contexts 3 + 2, 3 + 3)
    s.step(45, None)
    out.period()
    assert out.writes == 1
    assert (
        before["prefill_batches"] == 1
        and before["decode_steps"] == 1
        and before["decode_ctx_sum"] == 2 * 4
    )
    assert before["decode_s"] == pytest.approx(10e-9)
    assert (
        window["prefill_batches"] == 0
        and window["decode_steps"] == 2
        and window["decode_rows"] == 4
    )
    assert window["decode_ctx_sum"] == 2 * (5 + 6) and window["decode_s"] == pytest.approx(25e-9)


@pytest.mark.integration
def test_stamp_mismatches_are_reported_per_point(tiny_model_dir):
    """Like batches and the roofline accounting: a sweep's later points do not repeat an earlier
    point's count (each point's facts are read with reset)."""
    eng, _ = make_engine(tiny_model_dir)
    eng.stamp_mismatches = 2
    assert eng._facts(reset=True)["stamp_mismatches"] == 2
    assert eng._facts(reset=True)["stamp_mismatches"] == 0


@pytest.mark.integration
def test_the_engine_counts_for_the_roofline_from_the_window_start_and_not_under_a_profiler(
    tiny_model_dir,
):
    eng, out = make_engine(tiny_model_dir)
    batch = lambda rid: [("req", rid, [5, 6, 7], 4, True, None)]  # noqa: E731
    eng._generate(batch(1), set(), out, set())  # before the window: not counted
    eng.urgent.append(("window_start",))
    eng.poll_urgent()
    eng._generate(batch(2), set(), out, set())

    class Profiler:  # a capture window is open: its steps are not the model's speed
        annotate = staticmethod(lambda label: contextlib.nullcontext())
        decode_step = end_steps = staticmethod(lambda: None)

    eng.profiler = Profiler()
    eng._generate(batch(3), set(), out, set())
    eng.profiler = None
    acct = eng._facts(reset=True)["roofline_acct"]
    assert acct["prefill_batches"] == 1 and acct["prefill_tokens"] == 3
    assert acct["decode_steps"] == 3 and acct["decode_ctx_sum"] == (3 + 1) + (3 + 2) + (3 + 3)


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

    monkeypatch.setattr(eng, "_warm_shapes", warm)
    eng._warmup([(2, 4, 3)])
    assert seen == [False] and gc.isenabled()
    assert all(r() is None for r in garbage)  # collected at the warm-up's end
    kind, warmup_s, details = out.msgs[-1]
    assert kind == "warmed" and 0 <= details["gc_s"] <= warmup_s
    assert eng.gc.summary(reset=False)["collections"] == 0  # none of it charged to the run

    def fail(shapes):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(eng, "_warm_shapes", fail)
    sent = len(out.msgs)
    with pytest.raises(RuntimeError):
        eng._warmup([(2, 4, 3)])
    assert gc.isenabled() and len(out.msgs) == sent  # on again; no warm-up told


@pytest.mark.integration
def test_prompt_widths_are_padded_up_to_the_bucket_and_every_token_is_still_stamped(
    tiny_model_dir,
):
    eng, out = make_engine(tiny_model_dir)
    widths = input_shapes(eng)
    eng.info["prompt_bucket"] = 16
    batch = [("req", 1, [5] * 5, 4, True, None), ("req", 2, [6] * 9, 4, True, None)]
    assert eng._generate(batch, set(), out, set()) == 0  # one stamp per token
    eng.info["prompt_bucket"] = 1
    assert eng._generate(batch, set(), out, set()) == 0
    assert widths == [(2, 16), (2, 9)]  # 9 up to 16; with no bucket, the longest prompt
    dones = [m for m in out.msgs if m[0] == "done"]
    assert sorted((m[2], m[3]) for m in dones) == [(1, 4), (1, 4), (2, 4), (2, 4)]


@pytest.mark.integration
def test_compiled_graphs_counts_what_torch_compile_builds():
    from loadtest.backends.transformers.compiling import compiled_graphs

    torch._dynamo.reset()
    before = compiled_graphs() or 0
    f = torch.compile(lambda x: x * 2, backend="eager")  # no C compiler needed
    f(torch.ones(3))
    f(torch.ones(3))  # same shape: no new graph
    f(torch.ones(5, 2))  # a new shape: a new graph (a recompile inside a window would count)
    assert compiled_graphs() - before == 2


def test_batch_buckets_are_powers_of_two_up_to_the_cap_or_the_sizes_given():
    from loadtest.backends.transformers.compiling import (
        batch_bucket,
        batch_buckets_of,
        bucket_sizes,
    )

    assert bucket_sizes(16) == [1, 2, 4, 8, 16] and bucket_sizes(12) == [1, 2, 4, 8, 12]
    assert bucket_sizes(16, smallest=2) == [2, 4, 8, 16] and bucket_sizes(1, smallest=2) == [1]
    assert [batch_bucket(n, [1, 2, 4, 8, 16]) for n in (1, 2, 3, 5, 8, 9, 16)] == [
        1, 2, 4, 8, 8, 16, 16,
    ]  # fmt: skip
    assert [batch_bucket(n, bucket_sizes(12)) for n in (9, 12)] == [12, 12]
    # sizes given: those under the cap, and the cap always
    assert bucket_sizes(16, [4, 1, 64]) == [1, 4, 16]
    assert [batch_bucket(n, [1, 4, 16]) for n in (1, 2, 4, 5, 16)] == [1, 4, 4, 16, 16]
    spec = {"mode": "static", "compile": True, "max_batch_size": 16, "batch_buckets": None}
    # on by default with compile, from 2: one dynamic-batch graph serves them all
    assert batch_buckets_of(spec) == [2, 4, 8, 16]
    assert batch_buckets_of({**spec, "batch_buckets": True}) == [2, 4, 8, 16]
    assert batch_buckets_of({**spec, "max_batch_size": 1}) == [1]
    assert batch_buckets_of({**spec, "batch_buckets": [1, 4]}) == [1, 4, 16]  # as given
    assert batch_buckets_of({**spec, "batch_buckets": False}) is None
    assert batch_buckets_of({**spec, "compile": False}) is None  # off by default in eager mode
    assert batch_buckets_of({**spec, "compile": False, "batch_buckets": True}) == [1, 2, 4, 8, 16]
    assert batch_buckets_of({**spec, "mode": "continuous", "batch_buckets": True}) is None


@pytest.mark.integration
def test_a_bucketed_batch_runs_with_throw_away_rows_and_reports_only_the_real_ones(
    tiny_model_dir,
):
    eng, out = make_engine(tiny_model_dir)
    shapes = input_shapes(eng)
    eng.info["batch_buckets"] = [1, 2, 4, 8]
    fixed = [("req", i, [5] * (3 + i), 4, True, None) for i in (1, 2, 3)]
    assert eng._generate(fixed, set(), out, set()) == 0  # one stamp per token
    dones = sorted((m[2], m[3]) for m in out.msgs if m[0] == "done")
    assert shapes == [(4, 6)] and dones == [(1, 4), (2, 4), (3, 4)]  # 3 rows ran as 4
    assert all(rid > 0 for m in out.msgs if m[0] == "tokens" for rid in m[2])


@pytest.mark.integration
def test_a_batch_that_may_stop_at_eos_is_padded_with_copies_that_stop_with_it(tiny_model_dir):
    eng, out = make_engine(tiny_model_dir)
    outputs: list = []
    shapes = input_shapes(eng, outputs)
    first = [5, 6, 7]
    # the tiny model's greedy continuation of the first prompt; its second token is made the EOS
    eng._generate([("req", 1, first, 6, True, None)], set(), out, set())
    eos = outputs[-1][0, len(first) + 1].item()
    natural = [("req", 9, first, 6, False, eos), ("req", 10, [5], 6, False, eos)]
    runs = {}
    for buckets in (None, [1, 4, 8]):
        eng.info["batch_buckets"] = buckets
        out.msgs.clear()
        eng._generate(natural, set(), out, set())
        dones = sorted((m[2], m[3]) for m in out.msgs if m[0] == "done")
        runs[buckets is None] = (shapes[-1], outputs[-1].shape[1], dones)
    (unpadded, steps, dones), (padded, padded_steps, padded_dones) = runs[True], runs[False]
    assert unpadded == (2, 3) and padded == (4, 3)  # two copies of the first row
    assert padded_steps == steps  # the copies stopped with their row: no extra steps
    assert padded_dones == dones and dones[0] == (9, 2)  # the first row ended at its EOS
    assert outputs[-1][2:, 3:].tolist() == [outputs[-1][0, 3:].tolist()] * 2


@pytest.mark.integration
def test_a_compiled_warm_up_builds_one_graph_for_every_batch_size_from_two(tiny_model_dir):

    from loadtest.backends.transformers.compiling import compiled_graphs

    def graphs_built(warm) -> int:
        torch._dynamo.reset()
        before = compiled_graphs() or 0
        warm([(2, 8, 4), (4, 8, 4), (8, 8, 4)])
        return compiled_graphs() - before

    eng, out = make_engine(tiny_model_dir, compile=True, pad_decode=False)
    compile_eagerly(eng.model)
    assert graphs_built(eng._warm_shapes) == 2  # unmarked: static at 2, dynamic batch at 4
    assert graphs_built(eng._warmup) == 1  # marked: dynamic from the first compile
    kind, warmup_s, details = out.msgs[-1]  # the warm-up's compile and gc shares, of its time
    assert kind == "warmed" and 0 < details["compile_s"] <= warmup_s
    assert 0 <= details["gc_s"] <= warmup_s
    outputs: list = []
    input_shapes(eng, outputs)
    batch = [("req", i, [5] * (2 + i), 4, True, None) for i in (1, 2, 3)]
    graphs = compiled_graphs()
    eng._generate(batch, set(), out, set())  # 3 rows run as 4, no marks: the same graph
    assert compiled_graphs() == graphs and outputs[-1].shape[0] == 4
    compiled_tokens = outputs[-1][:3]
    eager, _ = make_engine(tiny_model_dir)
    input_shapes(eager, outputs)
    eager._generate(batch, set(), Inline(), set())
    assert torch.equal(compiled_tokens, outputs[-1])  # what it computes is eager's


def test_the_warm_up_marks_the_batch_dynamic_unless_the_sizes_listed_leave_one():
    from loadtest.backends.transformers.compiling import batch_buckets_of, marks_batch_dynamic

    def marks(**spec) -> bool:
        spec = {"mode": "static", "compile": True, "max_batch_size": 16, **spec}
        return marks_batch_dynamic(spec, batch_buckets_of(spec))

    # one graph for every size from 2; in a sweep the default buckets of a point of 2 are [2],
    # and the points after it reuse its graph
    assert marks() and marks(batch_buckets=True) and marks(max_batch_size=2)
    assert marks(batch_buckets=False) and marks(batch_buckets=[4])  # 4 and 16: two sizes
    assert not marks(batch_buckets=[16])  # one size listed: one static graph
    assert not marks(batch_buckets=[1, 16])  # size 1 is a static graph of its own anyway
    assert not marks(batch_buckets=[16], max_batch_size=8)  # the cap, 8, is the one size
    assert marks(batch_buckets=[16], max_batch_size=32)  # 16 and 32


@pytest.mark.integration
def test_a_compiled_warm_up_of_one_batch_size_builds_one_static_graph(tiny_model_dir):

    from loadtest.backends.transformers.compiling import compiled_graphs

    eng, out = make_engine(
        tiny_model_dir, compile=True, pad_decode=False, batch_buckets=[4], max_batch_size=4
    )
    assert eng.info["batch_buckets"] == [4]
    compile_eagerly(eng.model)
    torch._dynamo.reset()
    before = compiled_graphs() or 0
    eng._warmup([(4, 8, 4)])
    assert compiled_graphs() - before == 1
    eng._generate([("req", 1, [5] * 8, 4, True, None)] * 3, set(), out, set())  # runs as 4
    assert compiled_graphs() - before == 1
    # static: another size is another graph (a graph marked dynamic would have served it)
    eng.info["batch_buckets"] = None
    eng._generate([("req", 2, [5] * 8, 4, True, None)] * 3, set(), out, set())
    assert compiled_graphs() - before == 2


@pytest.mark.integration
def test_a_compiled_step_past_torchs_recompile_limit_fails_instead_of_running_eagerly(
    tiny_model_dir,
):
    import transformers
    from torch._dynamo.exc import FailOnRecompileLimitHit

    from loadtest.backends.transformers.compiling import RECOMPILE_LIMIT

    # loading sets torch's limits; unpadded decode steps, so two batch sizes are two graphs
    eng, out = make_engine(tiny_model_dir, compile=True, pad_decode=False)
    assert torch._dynamo.config.recompile_limit >= RECOMPILE_LIMIT
    # the engine's settings but static graphs and the eager backend, with not full graphs (as
    # transformers' default), where torch would fall back to eager at the limit
    config = transformers.CompileConfig(backend="eager", mode=None, dynamic=False)
    config._compile_all_devices = True
    eng.model.generation_config.compile_config = config
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=1):
        eng._generate([("req", 1, [5] * 8, 4, True, None)] * 2, set(), out, set())
        with pytest.raises(FailOnRecompileLimitHit):  # a second size: a second graph
            eng._generate([("req", 2, [5] * 8, 4, True, None)] * 3, set(), out, set())


@pytest.mark.integration
def test_a_compiled_warm_up_sizes_the_cache_for_the_whole_output_and_runs_a_few_steps(
    tiny_model_dir,
):

    from loadtest.backends.transformers.compiling import compiled_graphs
    from loadtest.backends.transformers.stamping import AFTER_SYNC
    from loadtest.backends.transformers.worker import WARM_STEPS

    eng, out = make_engine(tiny_model_dir, compile=True)
    compile_eagerly(eng.model)
    calls: list = []
    generate = eng.model.generate

    def spy(**kwargs):
        sequences = generate(**kwargs)
        calls.append((kwargs["max_new_tokens"], sequences.shape[1] - kwargs["input_ids"].shape[1]))
        return sequences

    eng.model.generate = spy
    new_tokens = WARM_STEPS + 12
    torch._dynamo.reset()
    eng._warmup([(2, 8, new_tokens), (4, 8, new_tokens)])
    # a static cache for 8 + 20 tokens, generated to 8 of them, one stamp per token still
    assert calls == [(new_tokens, WARM_STEPS)] * 2
    assert eng.stamp_source == AFTER_SYNC
    graphs = compiled_graphs()
    batch = [("req", i, [5] * 8, new_tokens, True, None) for i in (1, 2, 3)]
    out.msgs.clear()
    eng._generate(batch, set(), out, set())  # the run's longest output: the graph warmed
    assert compiled_graphs() == graphs and calls[-1] == (new_tokens, new_tokens)
    assert sorted((m[2], m[3]) for m in out.msgs if m[0] == "done") == [
        (i, new_tokens) for i in (1, 2, 3)
    ]
    # a longer cache is another graph: what sizing it for the run's longest output avoids
    eng._generate([("req", 9, [5] * 8, new_tokens + 8, True, None)] * 2, set(), out, set())
    assert compiled_graphs() > graphs


def test_the_decode_step_compiles_with_the_fast_passes_by_default_or_the_options_given():
    from loadtest.backends.transformers.compiling import FAST_COMPILE, decode_compile_config

    config, options = decode_compile_config(None)
    assert options == {**FAST_COMPILE, "triton.cudagraphs": True}
    assert options["pattern_matcher"] is False and len(options) == 4
    # torch.compile takes a mode or options: reduce-overhead's one setting moves to options
    assert config.mode is None and config.options == options
    assert decode_compile_config({})[1] == {"triton.cudagraphs": True}  # torch's own passes
    assert decode_compile_config({"triton.cudagraphs": False, "max_autotune": True})[1] == {
        "triton.cudagraphs": False,
        "max_autotune": True,
    }
    with pytest.raises(ValueError, match=r"backend.compile_options: 'nope', 'pattern' are not"):
        decode_compile_config({"pattern": False, "nope": 1})


@pytest.mark.integration
def test_a_compiled_engine_hands_its_inductor_options_to_torch_compile(tiny_model_dir, monkeypatch):
    eng, out = make_engine(tiny_model_dir, compile=True, compile_options={"max_autotune": True})
    assert eng.info["compile_options"] == {"max_autotune": True, "triton.cudagraphs": True}
    assert make_engine(tiny_model_dir)[0].info["compile_options"] is None  # eager: nothing compiled
    calls: list = []

    def recorded_compile(fn, **kwargs):
        calls.append(kwargs)
        return fn  # eager underneath: what matters is what torch.compile was asked for

    monkeypatch.setattr(torch, "compile", recorded_compile)
    eng.model.generation_config.compile_config._compile_all_devices = True  # CUDA only otherwise
    eng._generate([("req", 1, [5, 6, 7], 4, True, None)], set(), out, set())
    assert [(c["mode"], c["options"]) for c in calls] == [
        (None, {"max_autotune": True, "triton.cudagraphs": True})
    ]


def test_the_compile_cache_counts_come_from_inductors_counters():
    from torch._dynamo.utils import counters

    from loadtest.backends.transformers.compiling import compile_cache_counts

    saved = dict(counters["inductor"])
    try:
        counters["inductor"].clear()
        assert compile_cache_counts() is None  # nothing compiled by inductor
        counters["inductor"]["fxgraph_cache_hit"] += 4
        counters["inductor"]["fxgraph_cache_miss"] += 1
        assert compile_cache_counts() == {"hits": 4, "misses": 1}
    finally:
        counters["inductor"].clear()
        counters["inductor"].update(saved)
