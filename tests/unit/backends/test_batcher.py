"""The static batcher: how an engine's next batch forms from its inbox."""

from __future__ import annotations

import queue

from loadtest.backends.transformers import messages
from loadtest.backends.transformers.batcher import next_batch
from loadtest.config.transformers_spec import TransformersSpec


def _inbox(*items: tuple) -> queue.Queue:
    inbox: queue.Queue = queue.Queue()
    for item in items:
        inbox.put(item)
    return inbox


def _req(rid: int) -> messages.Req:
    return messages.req(rid, [1, 2], 4, True, None)


def test_a_batch_fills_to_its_size_taking_control_first_and_a_stop_waits_behind_it():
    spec = TransformersSpec(model="tiny", max_batch_size=3, max_wait_ms=0)
    taken: list = []

    def control(msg: messages.Inbound) -> bool:
        taken.append(msg[0])
        return msg[0] == "facts"

    inbox = _inbox(_req(1), messages.FACTS, _req(2), _req(3), _req(4), messages.STOP)
    assert [r[1] for r in next_batch(inbox, spec, control)] == [1, 2, 3]  # facts taken between
    assert taken == ["req", "facts"]  # the first message is offered as control too: a req is not
    # the stop arrives behind request 4: it ends that batch and is kept for the next call
    assert [r[1] for r in next_batch(inbox, spec, control)] == [4]
    assert next_batch(inbox, spec, control) is None
    assert inbox.empty()


def test_a_control_message_alone_is_an_empty_batch_and_single_mode_sends_one_at_a_time():
    spec = TransformersSpec(model="tiny", max_batch_size=8, max_wait_ms=50)
    inbox = _inbox(messages.FACTS)
    assert next_batch(inbox, spec, lambda msg: msg[0] == "facts") == []
    single = TransformersSpec(model="tiny", mode="single", max_batch_size=1, max_wait_ms=50)
    inbox = _inbox(_req(1), _req(2))
    assert [r[1] for r in next_batch(inbox, single, lambda msg: False)] == [1]
    assert [r[1] for r in next_batch(inbox, single, lambda msg: False)] == [2]
