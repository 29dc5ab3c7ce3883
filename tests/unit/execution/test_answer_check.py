"""The answer check's parts: a closed loop's sample drawn from the requests the run will send,
each answer under load tallied against its reference, and the proportion's interval."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loadtest.config.scenario import Scenario
from loadtest.core.proportion import wilson
from loadtest.execution.answer_check import AnswerCheck, answer_key, candidates
from loadtest.execution.request import RequestState
from loadtest.workload.plan import build_plan
from loadtest.workload.tokenizer import ByteTokenizer


def closed_loop() -> Scenario:
    return Scenario.model_validate(
        {
            "name": "a",
            "backend": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m"},
            "workload": {
                "input_tokens": {"dist": "uniform", "min": 4, "max": 40},
                "output_tokens": 8,
            },
            "load": {
                "arrival": {"kind": "concurrency", "users": 3},
                "requests": 30,
                "warmup_requests": 4,
            },
            "answers": {"sample": 10},
        }
    )


def test_a_closed_loops_sample_is_drawn_from_the_requests_its_users_will_send():
    sc = closed_loop()
    plan = build_plan(sc, ByteTokenizer(), lambda name: name)
    drawn = candidates(sc, plan)
    assert plan.source is not None
    sent = [plan.source.next(i, None, i < 4) for i in range(34)]  # as the users' counter goes
    assert [answer_key(r) for r in drawn] == [answer_key(r) for r in sent if not r.warmup]
    assert sc.backend.extra_body == {"temperature": 0}  # greedy, and the saved scenario says so


def test_each_answer_is_tallied_against_its_reference_where_it_first_parts():
    sc = closed_loop()
    plan = build_plan(sc, ByteTokenizer(), lambda name: name)
    a, b, c = candidates(sc, plan)[:3]
    check = AnswerCheck({answer_key(a): "the cat sat", answer_key(b): "a dog"}, reference_s=1.0)

    def done(req, reply, error=None, endpoint=None):
        st = RequestState(req, 0, 0, done_ns=1, error=error, endpoint=endpoint)
        st.reply = reply
        check.observe(st)

    done(a, "the cat sat", endpoint="e1")
    done(b, "a dot", endpoint="e2")  # parts at character 4
    done(b, None, error="http_500")  # failed under load: not compared
    done(c, "anything")  # not a reference's: not compared
    assert (check.whole.compared, check.whole.matched, check.unanswered) == (2, 1, 1)
    assert check.positions == [4]
    assert {k: (t.compared, t.matched) for k, t in check.by_endpoint.items()} == {
        "e1": (1, 1),
        "e2": (1, 0),
    }
    assert check.wants(replace(a, index=99)) and not check.wants(c)


def test_the_wilson_interval_holds_hand_computed_values():
    # 45 of 50 at 95%: z = 1.959964, z^2/n = 0.076829; centre (0.9 + 0.038415) / 1.076829
    # = 0.871462; half-width 1.959964 * sqrt(0.0018 + 0.000384146) / 1.076829 = 0.085063
    lo, hi = wilson(45, 50, 0.95)
    assert (lo, hi) == (pytest.approx(0.786399, abs=1e-5), pytest.approx(0.956525, abs=1e-5))
    assert wilson(0, 0, 0.95) == (0.0, 1.0)
    assert wilson(50, 50, 0.99)[1] == 1.0 and wilson(96, 96, 0.95)[1] == 1.0  # exactly: it holds p
    assert wilson(0, 30, 0.95)[0] == 0.0
