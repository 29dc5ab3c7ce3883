"""Prompts made before t0: a synthetic prompt's tokens cost the event loop ~2.7 µs a token to
make (a seeded passage, tokenized and checked to be a fixed point of the tokenizer: 0.34 ms for
128 tokens, 2.4 ms for 1,024), and a send that makes its prompt blocks the loop that long, so
the next send is late and every token that arrives meanwhile is read late. They are made before
the run instead, as vLLM's and AIPerf's benchmarks do, up to ``AHEAD_TOKENS`` tokens (4 bytes
each, kept as arrays); a plan past that makes the rest as they are sent, and says so.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadtest.workload.plan import Plan
    from loadtest.workload.tokenizer import Tokenizer

AHEAD_TOKENS = 16_000_000  # 64 MB of token ids, about 45 s of making on one core


class PromptsAhead:
    """The plan's prompt tokens, made before t0, taken once each as the requests are sent."""

    def __init__(self, plan: Plan, tokenizer: Tokenizer, budget: int | None = None) -> None:
        budget = AHEAD_TOKENS if budget is None else budget
        self._made: dict[int, array] = {}
        self.made = self.left = 0  # prompts made ahead, and the plan's left to make at send
        if plan.multi_turn:  # a session's turn is its conversation so far: made as it goes
            return
        for req in plan.requests:
            if req.dataset_row is not None:  # a dataset's tokens are already made
                continue
            if budget < req.input_tokens:
                self.left += 1
                continue
            ids = array("I", plan.prompt_ids(req, tokenizer))
            budget -= len(ids)
            self._made[req.index] = ids
            self.made += 1

    def take(self, index: int) -> list[int] | None:
        """Request ``index``'s prompt, made ahead (None: it is made at its send)."""
        ids = self._made.pop(index, None)
        return None if ids is None else ids.tolist()
