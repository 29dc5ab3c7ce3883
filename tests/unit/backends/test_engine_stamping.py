"""The engine's token stamps: what the step streamer reports per step (tokens, ends, cancellations),
and the two stamp sources (after generate()'s own sync, or the streamer) agreeing."""

from __future__ import annotations

import pytest
import torch

from loadtest.backends.transformers.engine_facts import engine_facts
from loadtest.backends.transformers.stamping import StepStreamer
from tests.engine_helpers import (
    Recorder,
    last_stamp,
    make_engine,
    req,
)


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
    stamps = [last_stamp(m) for m in out.msgs]
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
    assert [last_stamp(m) for m in fixed] == sorted(last_stamp(m) for m in fixed)
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
    eng.warmup.run([(2, 4, 3)])
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


@pytest.mark.integration
def test_stamp_mismatches_are_reported_per_point(tiny_model_dir):
    """Like batches and the roofline accounting: a sweep's later points do not repeat an earlier
    point's count (each point's facts are read with reset)."""
    eng, _ = make_engine(tiny_model_dir)
    eng.stamp_mismatches = 2
    assert engine_facts(eng, reset=True)["stamp_mismatches"] == 2
    assert engine_facts(eng, reset=True)["stamp_mismatches"] == 0
