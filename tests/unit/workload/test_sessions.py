"""Multi-turn sessions on the simulated server and the virtual clock: turns in order, each
after the previous reply plus think time, the prompt holding the whole history.

With the byte tokenizer a chat with no template renders as ``role: content`` lines ending in
``assistant:``, so prompt lengths are hand-computable: a first turn of a 10-byte message is
``user: `` 6 + 10 + newline 1 + ``assistant:`` 10 = 27 tokens, and each later turn adds the
5-token reply line (``assistant: `` 11 + 5 + 1) and the next message line (6 + 10 + 1): +34.
The sim answers after 0.1 ms a prompt token, then 1 ms a further token.
"""

from __future__ import annotations

import json

import pytest

from loadtest.core.errors import ScenarioError

SIM = {"kind": "sim", "max_concurrency": 64, "prefill_ms_per_token": 0.1, "decode_ms_per_token": 1}


def sessions_scenario(load: dict, **multi_turn) -> dict:
    return {
        "name": "sessions",
        "backend": SIM,
        "workload": {
            "input_tokens": 10,
            "output_tokens": 5,
            "multi_turn": {"turns": 3, "think_time": "100ms", **multi_turn},
        },
        "load": load,
        "outputs": {"requests_jsonl": True},
    }


def records(tmp_path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]


def test_each_turn_follows_the_reply_by_the_think_time_and_holds_the_history(
    tmp_path, run_virtual_fn
):
    m = run_virtual_fn(
        sessions_scenario({"arrival": {"kind": "constant", "rate": 1}, "duration": "3s"})
    )
    s = m["sessions"]
    assert (s["started"], s["completed"], s["turns_sent"], s["cut_at_window_end"]) == (3, 3, 9, 0)
    assert [t["input_tokens_mean"] for t in s["per_turn"]] == [27, 61, 95]
    # TTFT is the prompt's prefill: 2.7, 6.1 and 9.5 ms (HDR keeps 3 significant digits)
    assert [t["ttft_ms"]["p50"] for t in s["per_turn"]] == pytest.approx([2.7, 6.1, 9.5], rel=2e-3)
    assert s["ttft_first_turn_ms"]["count"] == 3 and s["ttft_later_turns_ms"]["count"] == 6
    assert s["history"].startswith("stand-in replies")  # the sim returns no text
    first = sorted((r for r in records(tmp_path) if r["session"] == 0), key=lambda r: r["turn"])
    # turn 1 done at 2.7 + 4 × 1 ms; turn 2 is meant 100 ms later; turn 2 is done 6.1 + 4 ms on
    assert [r["intended_ns"] for r in first] == [0, 106_700_000, 216_800_000]
    assert [r["turn"] for r in first] == [0, 1, 2]


def test_a_turn_due_after_the_window_is_not_sent(tmp_path, run_virtual_fn):
    # sessions start at 0, 1 and 2 s; the last one's third turn is due at 2.2168 s > 2.15 s
    m = run_virtual_fn(
        sessions_scenario({"arrival": {"kind": "constant", "rate": 1}, "duration": "2.15s"})
    )
    s = m["sessions"]
    assert (s["started"], s["completed"], s["cut_at_window_end"], s["turns_sent"]) == (3, 2, 1, 8)


def test_closed_loop_users_run_sessions_and_the_request_count_counts_turns(
    tmp_path, run_virtual_fn
):
    m = run_virtual_fn(
        sessions_scenario({"arrival": {"kind": "concurrency", "users": 2}, "requests": 7})
    )
    s = m["sessions"]
    assert m["requests"]["completed"] == 7 and s["turns_sent"] == 7
    # two sessions of three turns, then a third session whose second turn would be the 8th
    assert (s["started"], s["completed"], s["cut_at_window_end"]) == (3, 2, 1)
    assert sorted({r["index"] for r in records(tmp_path)}) == list(range(7))


def test_a_failed_turn_ends_its_session(tmp_path, run_virtual_fn):
    data = sessions_scenario({"arrival": {"kind": "concurrency", "users": 1}, "requests": 6})
    data["backend"] = {**SIM, "fail_every": 2}  # the 2nd submitted request fails
    data["load"]["validity"] = {"min_completed": 0}
    m = run_virtual_fn(data)
    s = m["sessions"]
    # session 1: turn 1 ok, turn 2 fails; session 2: turn 1 ok, turn 2 (4th sent) fails; ...
    assert (s["ended_by_failure"], s["completed"]) == (3, 0)
    assert s["turns_sent"] == 6 and m["requests"]["failed"] == 3


def test_a_sharegpt_conversation_gives_its_human_turns_in_order(tmp_path, run_virtual_fn):
    convo = {
        "conversations": [
            {"from": "human", "value": "hi there"},
            {"from": "gpt", "value": "hello"},
            {"from": "human", "value": "why?"},
            {"from": "gpt", "value": "because"},
            {"from": "human", "value": "ok"},
        ]
    }
    (tmp_path / "sg.json").write_text(json.dumps([convo]))
    data = {
        "name": "sg",
        "backend": SIM,
        "workload": {
            "dataset": str(tmp_path / "sg.json"),
            "output_tokens": 5,
            "multi_turn": {"max_turns": 2},
        },
        "load": {"arrival": {"kind": "concurrency", "users": 1}, "requests": 2},
    }
    s = run_virtual_fn(data)["sessions"]
    # "user: hi there\nassistant:" = 25; then + "assistant: " 5 "\n" + "user: why?\n" = 53
    assert [t["input_tokens_mean"] for t in s["per_turn"]] == [25, 53]
    assert (s["started"], s["completed"]) == (1, 1)


def test_turns_is_for_synthetic_prompts_only(tmp_path):
    from loadtest.config.loading import load_scenario
    from tests.conftest import write_scenario

    data = {
        "name": "x",
        "backend": SIM,
        "workload": {"dataset": "d.jsonl", "multi_turn": {"turns": 3}},
        "load": {"arrival": {"kind": "constant", "rate": 1}, "duration": "1s"},
    }
    with pytest.raises(ScenarioError, match="multi_turn.turns is for synthetic prompts"):
        load_scenario(write_scenario(tmp_path, data), [])
