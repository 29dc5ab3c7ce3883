"""The engine's roofline accounting from step stamps: steps handed over between two writes count
as if one by one, in the accounting current when handed over, from the window's start and never
under a profiler."""

from __future__ import annotations

import contextlib

import pytest

from loadtest.backends.transformers.engine_facts import engine_facts
from loadtest.backends.transformers.stamping import StepStreamer
from loadtest.core.step_accounting import StepAccounting
from tests.engine_helpers import (
    Recorder,
    make_engine,
    req,
)


def test_roofline_accounting_from_step_stamps():
    from loadtest.core.step_accounting import StepAccounting

    acct, counting = StepAccounting(), [True]
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
    assert acct.prefill_batches == 1 and acct.prefill_tokens == 8
    assert acct.prefill_attn_pairs == 3 * 4 // 2 + 5 * 6 // 2
    assert acct.prefill_s == pytest.approx(0.010)
    assert acct.decode_steps == 2 and acct.decode_rows == 4
    assert acct.decode_ctx_sum == 2 * (5 + 1) + 2 * (5 + 3)  # context = width + steps before
    assert acct.decode_s == pytest.approx(0.006)


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
    from loadtest.core.step_accounting import StepAccounting

    acct, out = StepAccounting(), PeriodRecorder()
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
    assert acct.prefill_batches == 1 and acct.prefill_s == pytest.approx(10e-9)
    assert acct.decode_steps == 5 and acct.decode_rows == 10
    assert acct.decode_ctx_sum == 2 * sum(3 + k for k in range(1, 6))
    assert acct.decode_s == pytest.approx(50e-9)


def test_a_step_counts_in_the_accounting_current_when_it_was_handed_over():
    """The window opens (a new accounting) while earlier steps still wait for the writer: they
    count in the old one, the later ones in the new, though one drain takes them all."""
    from loadtest.core.step_accounting import StepAccounting

    before, window, out = StepAccounting(), StepAccounting(), PeriodRecorder()
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
        before.prefill_batches == 1 and before.decode_steps == 1 and before.decode_ctx_sum == 2 * 4
    )
    assert before.decode_s == pytest.approx(10e-9)
    assert window.prefill_batches == 0 and window.decode_steps == 2 and window.decode_rows == 4
    assert window.decode_ctx_sum == 2 * (5 + 6) and window.decode_s == pytest.approx(25e-9)


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
    acct = StepAccounting(**engine_facts(eng, reset=True)["roofline_acct"])
    assert acct.prefill_batches == 1 and acct.prefill_tokens == 3
    assert acct.decode_steps == 3 and acct.decode_ctx_sum == (3 + 1) + (3 + 2) + (3 + 3)
