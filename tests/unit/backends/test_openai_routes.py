"""How requests are spread over several endpoints, checked by hand."""

from __future__ import annotations

from loadtest.backends.openai.routes import Route, Router


def routes(n: int) -> list[Route]:
    return [Route(f"http://h{k}/v1", f"http://h{k}/v1/chat/completions", None) for k in range(n)]


def test_round_robin_takes_each_in_turn_whatever_is_in_flight():
    router = Router(routes(3), "round_robin")
    picked = [router.pick().base[7:9] for _ in range(7)]
    assert picked == ["h0", "h1", "h2", "h0", "h1", "h2", "h0"]


def test_least_outstanding_takes_the_idlest_ties_in_turn():
    router = Router(routes(3), "least_outstanding")
    a, b, c = (router.pick() for _ in range(3))  # all idle: in turn
    assert [r.base[7:9] for r in (a, b, c)] == ["h0", "h1", "h2"]
    router.done(b)  # h1 has none in flight now
    assert router.pick() is b
    router.done(a)
    router.done(c)  # h0 and h2 idle, h1 busy: the tie goes on in turn, from after h1
    assert router.pick() is c
    assert router.pick() is a
    assert [r.outstanding for r in router.routes] == [1, 1, 1]
