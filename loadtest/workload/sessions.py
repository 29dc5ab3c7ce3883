"""A multi-turn session's conversation: each turn's prompt is the history so far.

The history holds what the system under test actually replied to the earlier turns (the server's
text over HTTP). A backend that returns no text (a simulator, the in-process engine, which streams
token stamps only) gets a stand-in reply of the same token count, so each later prompt is as long
as it would be; the result counts those stand-ins.
"""

from __future__ import annotations

import random
from dataclasses import replace

from loadtest.workload.plan import Plan
from loadtest.workload.requests import PlannedRequest
from loadtest.workload.tokenizer import Tokenizer, render_messages_plainly


class Conversation:
    """One session's messages; ``turn`` makes the next request, ``reply`` records its answer."""

    def __init__(self, plan: Plan, tokenizer: Tokenizer, first: PlannedRequest) -> None:
        self._plan, self._tok = plan, tokenizer
        self.messages: list[dict] = plan.system_messages(first)

    def turn(self, planned: PlannedRequest) -> tuple[PlannedRequest, list[int]]:
        """The turn as sent: its message appended to the history, ``input_tokens`` the whole
        prompt's, and the prompt's token ids."""
        self.messages.append(
            {"role": "user", "content": self._plan.turn_message(planned, self._tok)}
        )
        text = self._tok.render_chat(self.messages) or render_messages_plainly(self.messages)
        ids = self._tok.encode(text)
        return replace(planned, input_tokens=len(ids), history=tuple(self.messages)), ids

    def reply(self, req: PlannedRequest, text: str | None, tokens: int) -> None:
        """The assistant's answer joins the history: the text given, or a stand-in of
        ``tokens`` tokens (seeded by the turn, so a replicate sends the same history)."""
        if text is None:
            ids = self._tok.sample_ids(
                random.Random(req.prompt_seed ^ 0x5EED), tokens, natural=self._plan.text.natural
            )
            text = self._tok.decode(ids)
        self.messages.append({"role": "assistant", "content": text})
