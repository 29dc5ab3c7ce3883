"""Request bodies: what each planned request asks the server for, in its API's shape.

Chat, completions and the Responses API are streamed, with usage (unless ``stream: false``), and (when the plan fixes
output lengths) the server's own way of asking for exactly ``n`` tokens; tools, an answer
format and media go the way each API takes them. Embeddings and rerank are one JSON answer
each: their bodies carry the request's texts (``Plan.input_ids``).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

from loadtest.backends.openai.tokens import fit_in_template
from loadtest.config.apis import POOLING_APIS
from loadtest.core.json_types import JsonObject, json_list
from loadtest.workload.content import Content
from loadtest.workload.plan import Plan
from loadtest.workload.requests import PlannedRequest
from loadtest.workload.tokenizer import Tokenizer, render_messages_plainly

if TYPE_CHECKING:
    from loadtest.config.backend_specs import OpenAISpec

TEMPLATED_APIS = ("chat", "responses")  # the server wraps the prompt in the chat template
PATHS = {
    "chat": "/chat/completions",
    "completions": "/completions",
    "responses": "/responses",
    "embeddings": "/embeddings",
    "rerank": "/rerank",
}


class RequestBodies:
    """Bodies for one backend: ``tokenizer`` decodes prompt ids and renders histories; a chat
    prompt is fitted inside the template when ``fit`` (the model's own tokenizer is here)."""

    def __init__(self, spec: OpenAISpec, tokenizer: Tokenizer, fit: bool) -> None:
        self.spec = spec
        self.api: str = spec.api
        self.tokenizer = tokenizer
        self.fit = fit
        self.plan: Plan | None = None  # dataset rows are sent as their text (or chat messages)
        self.fixed_via: str | None = None  # how the server takes a fixed length (the probe's)
        self._content: JsonObject = {}  # the plan's tools and answer format, in the API's shape

    def use_plan(self, plan: Plan) -> None:
        """The plan whose requests the bodies are for (its datasets, media, tools)."""
        self.plan = plan
        self._content = content_fields(plan.content, self.api)

    def for_request(
        self, req: PlannedRequest, prompt_ids: list[int] | None, facts: Counter[str]
    ) -> dict:
        """A planned request's body, addressed to its model (a model mix's) or the backend's."""
        body = self._body(req, prompt_ids, facts)
        if req.model is not None:
            body["model"] = req.model
        return body

    def _body(
        self, req: PlannedRequest, prompt_ids: list[int] | None, facts: Counter[str]
    ) -> JsonObject:
        """A session turn's conversation, a dataset row, or the synthetic prompt's text; for
        embeddings and rerank, all of its texts."""
        if self.api in POOLING_APIS:
            return self.pooled(req, prompt_ids)
        fixed = self.fixed_via if req.ignore_eos else None
        media = () if self.plan is None or self.plan.media is None else (
            self.plan.media.for_request(req.index).parts
        )  # fmt: skip
        if req.history is not None:  # a session's turn: the conversation so far
            history = list(req.history)
            text = (
                ""
                if self.api in TEMPLATED_APIS
                else self.tokenizer.render_chat(history) or render_messages_plainly(history)
            )
            return self.streaming(text, req.history, req.output_tokens, fixed, facts, media)
        row = None
        if req.dataset_row is not None and self.plan:
            assert self.plan.dataset is not None  # a row is planned only from a dataset
            row = self.plan.dataset[req.dataset_row]
        if row is not None:
            text = row.text
        else:
            assert prompt_ids is not None  # needs_prompt_ids: the runner made them
            text = self.tokenizer.decode(prompt_ids)
        if row is None and self.api in TEMPLATED_APIS and self.fit:
            text = fit_in_template(
                self.tokenizer,
                text,
                req.input_tokens,
                self.plan is not None and self.plan.text.natural,
            )
        messages = row.messages if row else None
        if row is not None and row.images:  # the row's own images, after any synthetic ones
            media = (*media, *({"type": "image_url", "image_url": {"url": u}} for u in row.images))
            if messages is None:  # a prompt row: sent as a user message holding its images
                messages = ({"role": "user", "content": text},)
        return self.streaming(text, messages, req.output_tokens, fixed, facts, media)

    def streaming(
        self,
        text: str,
        messages: Any,
        n: int,
        fixed_via: str | None,
        facts: Counter,
        media: tuple[dict, ...] = (),
    ) -> JsonObject:
        """A streaming request for ``n`` tokens; ``fixed_via``: how to ask for exactly ``n``."""
        streamed = self.spec.stream
        body: JsonObject = {"model": self.spec.model, "stream": streamed}
        if self.api == "responses":
            body["max_output_tokens"] = n
            msgs = list(messages) if messages else [{"role": "user", "content": text}]
            body["input"] = _responses_input(_with_media(msgs, media, responses=True))
        else:
            body["max_tokens"] = n
            if streamed:
                body["stream_options"] = {"include_usage": True}
            if self.api == "chat":
                msgs = list(messages) if messages else [{"role": "user", "content": text}]
                body["messages"] = _with_media(msgs, media, responses=False)
            else:
                body["prompt"] = text
        body.update(self._content)
        if fixed_via is not None:
            self._ask_fixed(body, n, fixed_via, facts)
        body.update(self.spec.extra_body)
        return body

    def pooled(self, req: PlannedRequest, prompt_ids: list[int] | None) -> JsonObject:
        """An embeddings request (its inputs) or a rerank request (a query, its documents)."""
        plan = self.plan
        if plan is not None and req.dataset_row is not None:
            rows = plan.dataset
            assert rows is not None  # a row is planned only from a dataset
            texts = [rows[(req.dataset_row + k) % len(rows)].text for k in range(req.inputs)]
        elif plan is not None:
            texts = [self.tokenizer.decode(ids) for ids in plan.input_ids(req, self.tokenizer)]
        else:
            assert prompt_ids is not None  # needs_prompt_ids: the runner made them
            texts = [self.tokenizer.decode(prompt_ids)] * req.inputs
        return self.pooled_body(texts)

    def pooled_body(self, texts: list[str]) -> JsonObject:
        body: JsonObject = {"model": self.spec.model}
        if self.api == "embeddings":
            body.update(input=json_list(texts), encoding_format="float")
        else:
            body.update(query=texts[0], documents=json_list(texts[1:] or [texts[0]]))
        body.update(self.spec.extra_body)
        return body

    def _ask_fixed(self, body: JsonObject, n: int, via: str, facts: Counter) -> None:
        if via == "ignore_eos":
            body.update(ignore_eos=True, min_tokens=n)
        elif via == "generation_config":  # transformers serve: its GenerationConfig, as JSON text
            config: JsonObject = {"max_new_tokens": n, "min_new_tokens": n}
            if getattr(self.tokenizer, "eos_token_id", None) is not None:
                config["eos_token_id"] = self.tokenizer.eos_token_id
            body["generation_config"] = json.dumps(config)
        else:
            facts["fixed_unsupported"] += 1


def content_fields(c: Content, api: str) -> JsonObject:
    """Tools, tool_choice and the answer format in ``api``'s shape: made once a plan, and the
    same objects sent in every request's body."""
    out: JsonObject = {}
    if c.tools:
        if api == "responses":  # flat: {"type": "function", "name", "parameters"}
            out["tools"] = json_list({"type": "function", **t["function"]} for t in c.tools)
            choice = c.tool_choice
            if isinstance(choice, dict):
                choice = {"type": "function", "name": choice["function"]["name"]}
            out["tool_choice"] = choice
        else:
            out["tools"] = json_list(c.tools)
            out["tool_choice"] = c.tool_choice
    if c.response_format is not None:
        if api == "responses":
            fmt = c.response_format
            out["text"] = {
                "format": {"type": "json_schema", **fmt["json_schema"]}
                if fmt["type"] == "json_schema"
                else {"type": "json_object"}
            }
        else:
            out["response_format"] = c.response_format
    return out


def _with_media(messages: list, parts: tuple[dict, ...], responses: bool) -> list:
    """The messages with ``parts`` (images, audio) added to the last one's content."""
    if not parts:
        return messages
    last = dict(messages[-1])
    text = last.get("content")
    content = list(text) if isinstance(text, list) else [{"type": "text", "text": text or ""}]
    if responses:
        content = [
            {"type": "input_text", "text": p["text"]} if p.get("type") == "text" else p
            for p in content
        ] + [{"type": "input_image", "image_url": p["image_url"]["url"]} for p in parts]
    else:
        content += list(parts)
    last["content"] = content
    return [*messages[:-1], last]


def _responses_input(messages: list) -> str | list:
    """The Responses API's ``input``: a lone user message as its text, else the messages."""
    if len(messages) == 1 and isinstance(messages[0].get("content"), str):
        return messages[0]["content"]
    return messages
