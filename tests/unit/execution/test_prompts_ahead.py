"""Prompts are made before t0, within a budget of tokens, and each is taken once at its send;
a run that makes any at their sends says so."""

from __future__ import annotations

import asyncio

from loadtest.backends.noop import NoopBackend
from loadtest.config.scenario import Scenario
from loadtest.core.clock import run_virtual
from loadtest.execution.prompts_ahead import PromptsAhead
from loadtest.execution.runner import Runner
from loadtest.workload.plan import build_plan
from loadtest.workload.tokenizer import ByteTokenizer


def scenario(input_tokens: int = 8, requests: int = 5, multi_turn: dict | None = None) -> Scenario:
    workload: dict = {"input_tokens": input_tokens, "output_tokens": 2}
    if multi_turn is not None:
        workload["multi_turn"] = multi_turn
    return Scenario.model_validate(
        {
            "name": "p",
            "backend": {"kind": "noop"},
            "workload": workload,
            "load": {"arrival": {"kind": "constant", "rate": 10}, "requests": requests},
        }
    )


def test_prompts_are_made_within_the_budget_and_taken_once():
    tok = ByteTokenizer()
    plan = build_plan(scenario(), tok, lambda name: name)
    ahead = PromptsAhead(plan, tok, budget=20)  # 8 + 8 tokens fit, the third's 8 do not
    assert (ahead.made, ahead.left) == (2, 3)
    first, second, third = plan.requests[:3]
    assert ahead.take(first.index) == plan.prompt_ids(first, tok)  # the same seeded prompt
    assert ahead.take(first.index) is None  # taken once
    assert ahead.take(second.index) == plan.prompt_ids(second, tok)
    assert ahead.take(third.index) is None  # past the budget: made at its send


def test_a_session_plan_makes_its_turns_as_they_go():
    tok = ByteTokenizer()
    sc = scenario(multi_turn={"turns": 2})
    ahead = PromptsAhead(build_plan(sc, tok, lambda name: name), tok)
    assert (ahead.made, ahead.left) == (0, 0)


class PromptedNoop(NoopBackend):
    """The noop backend, asking for prompt ids as a served model's client does; it keeps
    what it was given."""

    needs_prompt_ids = True
    given: list[list[int]] = []

    async def submit(self, req, prompt_ids):
        self.given.append(prompt_ids)
        async for ev in super().submit(req, prompt_ids):
            yield ev


async def run(clock, sc: Scenario, budget: int):
    backend = PromptedNoop(sc.backend, clock)
    backend.given = []
    info = await backend.start()
    plan = build_plan(sc, info.tokenizer, lambda name: name)
    made_at: list[int] = []  # when the plan made a prompt (the virtual clock's ns)
    make = plan.prompt_ids

    def counted(req, tokenizer, **kw):
        made_at.append(clock.now_ns())
        return make(req, tokenizer, **kw)

    plan.prompt_ids = counted  # type: ignore[method-assign]
    runner = Runner(
        plan,
        backend,
        info.tokenizer,
        clock,
        sc.load,
        10**9,
        prompts=PromptsAhead(plan, info.tokenizer, budget),
    )
    out = await runner.run()
    await asyncio.sleep(0)
    return plan, backend.given, made_at, runner.t0, out


def test_a_run_sends_the_prompts_made_ahead_and_counts_those_made_at_send():
    sc = scenario(input_tokens=8, requests=5)
    plan, given, made_at, t0, out = run_virtual(run, sc, 24)  # three prompts fit
    expected = [plan.prompt_ids(r, ByteTokenizer()) for r in plan.requests]
    assert given == expected  # made ahead or at the send: the same prompts
    assert len(made_at) == 5 + 5  # 3 ahead + 2 at their sends, then 5 for `expected`
    assert sum(t < t0 for t in made_at) == 3 and out.prompts_at_send == 2


def test_a_run_past_the_budget_says_how_many_prompts_it_made_at_their_sends(tmp_path, monkeypatch):
    import loadtest.execution.prompts_ahead as prompts_ahead
    from tests.conftest import run_virtual_scenario

    monkeypatch.setattr(NoopBackend, "needs_prompt_ids", True)
    monkeypatch.setattr(prompts_ahead, "AHEAD_TOKENS", 10)  # two prompts of 4 tokens
    data = {
        "name": "ahead",
        "backend": {"kind": "noop"},
        "workload": {"input_tokens": 4, "output_tokens": 2},
        "load": {"arrival": {"kind": "constant", "rate": 50}, "requests": 5},
        "telemetry": {"gpu": False},
    }
    m = run_virtual_scenario(tmp_path, data)
    assert m["requests"]["completed"] == 5
    assert any(
        w.startswith("3 prompts were made as they were sent, past the 10 prompt tokens")
        for w in m["validity"]["warnings"]
    )
    monkeypatch.setattr(prompts_ahead, "AHEAD_TOKENS", 20)  # all five
    m = run_virtual_scenario(tmp_path / "all", data)
    assert not any("prompts were made" in w for w in m["validity"]["warnings"])
