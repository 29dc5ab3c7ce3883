"""Request bodies: what each planned request asks the server for, streamed, with usage, and
(when the plan fixes output lengths) the server's own way of asking for exactly ``n`` tokens."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from loadtest.backends.openai.tokens import fit_in_template
from loadtest.workload.tokenizer import render_messages_plainly


class RequestBodies:
    """Bodies for one backend: ``tokenizer`` decodes prompt ids and renders histories; a chat
    prompt is fitted inside the template when ``fit`` (the model's own tokenizer is here)."""

    def __init__(self, spec: Any, tokenizer: Any, fit: bool) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        self.fit = fit
        self.plan: Any = None  # dataset rows are sent as their text (or chat messages)
        self.fixed_via: str | None = None  # how the server takes a fixed length (the probe's)

    def for_request(self, req: Any, prompt_ids: Any, facts: Counter) -> dict:
        """A planned request's body: a session turn's conversation, a dataset row, or the
        synthetic prompt's text."""
        fixed = self.fixed_via if req.ignore_eos else None
        if req.history is not None:  # a session's turn: the conversation so far
            history = list(req.history)
            text = (
                ""
                if self.spec.api == "chat"
                else self.tokenizer.render_chat(history) or render_messages_plainly(history)
            )
            return self.streaming(text, req.history, req.output_tokens, fixed, facts)
        row = (
            self.plan.dataset[req.dataset_row]
            if req.dataset_row is not None and self.plan
            else None
        )
        text = row.text if row else self.tokenizer.decode(prompt_ids)
        if row is None and self.spec.api == "chat" and self.fit:
            text = fit_in_template(self.tokenizer, text, req.input_tokens)
        messages = row.messages if row else None
        return self.streaming(text, messages, req.output_tokens, fixed, facts)

    def streaming(
        self, text: str, messages: Any, n: int, fixed_via: str | None, facts: Counter
    ) -> dict:
        """A streaming request for ``n`` tokens; ``fixed_via``: how to ask for exactly ``n``."""
        body: dict[str, Any] = {
            "model": self.spec.model,
            "stream": True,
            "max_tokens": n,
            "stream_options": {"include_usage": True},
        }
        if self.spec.api == "chat":
            body["messages"] = list(messages) if messages else [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        if fixed_via is not None:
            self._ask_fixed(body, n, fixed_via, facts)
        body.update(self.spec.extra_body)
        return body

    def _ask_fixed(self, body: dict, n: int, via: str, facts: Counter) -> None:
        if via == "ignore_eos":
            body.update(ignore_eos=True, min_tokens=n)
        elif via == "generation_config":  # transformers serve: its GenerationConfig, as JSON text
            config: dict[str, Any] = {"max_new_tokens": n, "min_new_tokens": n}
            if getattr(self.tokenizer, "eos_token_id", None) is not None:
                config["eos_token_id"] = self.tokenizer.eos_token_id
            body["generation_config"] = json.dumps(config)
        else:
            facts["fixed_unsupported"] += 1
