"""From scenario to ``Plan``: what each request asks for, and (open loop) when it is sent.

Three seeded streams, one per random dimension (``seeds.schedule``, ``.prompts``, ``.lengths``),
so changing the arrival process never changes the prompts, and the same seeds always give a
byte-identical plan (``Plan.to_jsonl``). Everything is decided before t0.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from loadtest.config.scenario import (
    FixedLength,
    LognormalLength,
    NormalLength,
    Scenario,
    UniformLength,
)
from loadtest.core.errors import ScenarioError
from loadtest.workload.arrivals import ClosedLoop, make_arrival
from loadtest.workload.tokenizer import ByteTokenizer, Tokenizer, render_messages_plainly


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request as planned before t0: when, how long in and out, which prompt."""

    index: int
    offset_ns: int | None  # from t0; None in a closed loop (the user's previous response decides)
    input_tokens: int
    output_tokens: int  # exact (fixed output) or the cap (natural output)
    prompt_seed: int  # synthetic prompt: seeds its token ids
    dataset_row: int | None  # dataset prompt: the row
    warmup: bool
    ignore_eos: bool
    prefix_group: int | None = None  # shared_prefix: which group's prefix the prompt starts with


# --- lengths ------------------------------------------------------------------------------


def _sampler(spec) -> Callable[[random.Random], int]:
    if isinstance(spec, int):
        return lambda rng: spec
    if isinstance(spec, FixedLength):
        return lambda rng: spec.value
    clip = lambda x: int(min(spec.max, max(spec.min, round(x))))  # noqa: E731
    if isinstance(spec, UniformLength):
        return lambda rng: rng.randint(spec.min, spec.max)
    if isinstance(spec, NormalLength):
        return lambda rng: clip(rng.gauss(spec.mean, spec.std))
    if isinstance(spec, LognormalLength):
        mu = math.log(spec.mean) - spec.sigma**2 / 2  # so that the distribution's mean is `mean`
        return lambda rng: clip(rng.lognormvariate(mu, spec.sigma))
    raise TypeError(spec)


# --- datasets -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetPrompt:
    """One dataset row, tokenized."""

    text: str  # a chat row: rendered with the model's template
    token_ids: tuple[int, ...]
    messages: tuple[dict, ...] | None = (
        None  # a chat row as written (an HTTP chat API takes it as is)
    )


def read_dataset(path: Path, tokenizer: Tokenizer) -> list[DatasetPrompt]:
    """JSONL rows ``{"prompt": str}`` or ``{"messages": [...]}``; chats use the model's template.
    A ShareGPT file (a JSON array, or JSONL, of ``{"conversations": [{"from", "value"}, ...]}``)
    is recognised by its content: each conversation's first human turn becomes a chat prompt."""
    rows = []
    text_all = path.read_text(encoding="utf-8")
    if text_all.lstrip().startswith("["):  # one JSON document: ShareGPT's usual shape
        try:
            items = json.loads(text_all)
        except json.JSONDecodeError as exc:
            raise ScenarioError([f"{path}:{exc.lineno}: not JSON: {exc.msg}"]) from None
        entries = [(f"[{i}]", item) for i, item in enumerate(items)]
    else:
        entries = []
        for lineno, line in enumerate(text_all.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entries.append((str(lineno), json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ScenarioError([f"{path}:{lineno}: not JSON: {exc.msg}"]) from None
    for where, row in entries:
        if isinstance(row, dict) and "conversations" in row:
            row = _sharegpt_row(row, path, where)
            if row is None:
                continue  # a conversation with no human turn holds no prompt
        text = _row_text(row, tokenizer, path, where)
        messages = tuple(row["messages"]) if "prompt" not in row else None
        rows.append(DatasetPrompt(text, tuple(tokenizer.encode(text)), messages))
    if not rows:
        raise ScenarioError([f"{path}:1: the dataset holds no prompts"])
    return rows


def _sharegpt_row(row: dict, path: Path, where: str) -> dict | None:
    """ShareGPT's first human turn as a one-message chat, or None when it has none."""
    turns = row["conversations"]
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise ScenarioError([f"{path}:{where}: conversations: expected a list of {{from, value}}"])
    for t in turns:
        if t.get("from") in ("human", "user") and isinstance(t.get("value"), str) and t["value"]:
            return {"messages": [{"role": "user", "content": t["value"]}]}
    return None


def _row_text(row: object, tokenizer: Tokenizer, path: Path, lineno: object) -> str:
    if isinstance(row, dict) and isinstance(row.get("prompt"), str):
        return row["prompt"]
    if isinstance(row, dict) and isinstance(row.get("messages"), list):
        msgs = row["messages"]
        if all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in msgs) and msgs:
            return tokenizer.render_chat(msgs) or render_messages_plainly(msgs)
        raise ScenarioError([f"{path}:{lineno}: messages: expected a list of {{role, content}}"])
    raise ScenarioError([f'{path}:{lineno}: expected {{"prompt": ...}} or {{"messages": [...]}}'])


# --- the plan -------------------------------------------------------------------------------


class RequestSource:
    """The deterministic sequence of request contents (lengths, prompts), independent of timing."""

    def __init__(self, scenario: Scenario, dataset: list[DatasetPrompt] | None) -> None:
        w = scenario.workload
        self._lengths = random.Random(scenario.seeds.lengths)
        self._prompts = random.Random(scenario.seeds.prompts)
        self._input = None if dataset else _sampler(w.input_tokens)
        self._prefix = w.shared_prefix
        self._output = _sampler(w.output_tokens)
        self._dataset = dataset
        self._order: list[int] = []
        self._ignore_eos = w.output == "fixed"

    def next(self, index: int, offset_ns: int | None, warmup: bool) -> PlannedRequest:
        """The next request's contents (lengths, prompt), whatever its timing."""
        out = self._output(self._lengths)
        if self._dataset is None:
            assert self._input is not None  # no dataset: lengths come from the distribution
            n_in, row = self._input(self._lengths), None
        else:
            if not self._order:  # a fresh seeded shuffle each pass over the dataset
                self._order = list(range(len(self._dataset)))
                self._prompts.shuffle(self._order)
            row = self._order.pop()
            n_in = len(self._dataset[row].token_ids)
        group = None
        if self._prefix is not None:
            group = self._prompts.randrange(self._prefix.groups)
            n_in += self._prefix.tokens
        seed = self._prompts.getrandbits(63)
        return PlannedRequest(
            index, offset_ns, n_in, out, seed, row, warmup, self._ignore_eos, group
        )


@dataclass
class Plan:
    """Open loop: ``requests`` with offsets. Closed loop: ``closed_loop`` and ``source`` instead.

    ``window_start_ns`` / ``window_end_ns`` are offsets from t0; a window that ends when its last
    request is done has ``window_end_ns`` None. ``warmup_count``/``measured_count`` are known for
    open-loop plans and for count-based closed-loop windows.
    """

    requests: list[PlannedRequest]
    window_start_ns: int | None
    window_end_ns: int | None
    closed_loop: ClosedLoop | None = None
    source: RequestSource | None = None
    think_rng: random.Random | None = None
    warmup_ns: int | None = None
    warmup_requests: int | None = None
    measured_requests: int | None = None
    dataset: list[DatasetPrompt] | None = None
    prefix: tuple[int, int] | None = None  # shared_prefix: (tokens, seed of group 0's prefix)

    def to_jsonl(self) -> str:
        """The plan as JSON lines (to compare two plans byte for byte)."""
        return "".join(json.dumps(asdict(r), separators=(",", ":")) + "\n" for r in self.requests)

    def prompt_ids(self, req: PlannedRequest, tokenizer: Tokenizer) -> list[int]:
        """A request's prompt token ids: its dataset row, or its seeded random prompt."""
        if req.dataset_row is not None:
            assert self.dataset is not None  # a dataset row only exists with a dataset
            return list(self.dataset[req.dataset_row].token_ids)
        if req.prefix_group is not None and self.prefix is not None:
            tokens, seed = self.prefix
            shared = tokenizer.random_prompt_ids(random.Random(seed + req.prefix_group), tokens)
            own = tokenizer.random_prompt_ids(
                random.Random(req.prompt_seed), req.input_tokens - tokens
            )
            return shared + own
        return tokenizer.random_prompt_ids(random.Random(req.prompt_seed), req.input_tokens)

    @property
    def planned_count(self) -> int | None:
        """How many requests the plan sends (None for an open-ended closed loop)."""
        if self.closed_loop is None:
            return len(self.requests)
        if self.measured_requests is not None:
            return (self.warmup_requests or 0) + self.measured_requests
        return None


def build_plan(scenario: Scenario, tokenizer: Tokenizer, resolve: Callable[[str], Path]) -> Plan:
    """Every request of the run, fixed before t0 from the scenario's seeds."""
    load = scenario.load
    dataset = (
        read_dataset(resolve(scenario.workload.dataset), tokenizer)
        if scenario.workload.dataset
        else None
    )
    source = RequestSource(scenario, dataset)
    sp = scenario.workload.shared_prefix
    # each group's prefix is seeded from the prompts seed: the same prefixes in every replicate
    prefix = None if sp is None else (sp.tokens, scenario.seeds.prompts * 1_000_003)
    arrival = make_arrival(load.arrival, resolve)
    schedule_rng = random.Random(scenario.seeds.schedule)
    if isinstance(arrival, ClosedLoop):
        return Plan(
            [],
            load.warmup or 0 if load.warmup_requests is None else None,
            None if load.duration is None else (load.warmup or 0) + load.duration,
            arrival,
            source,
            schedule_rng,
            load.warmup,
            load.warmup_requests,
            load.requests,
            dataset,
            prefix=prefix,
        )
    requests = list(_open_loop(load, arrival.offsets_ns(schedule_rng), source))
    measured = [r for r in requests if not r.warmup]
    if not measured:
        raise ScenarioError(
            ["load: the plan holds no measured request (window empty, or the trace ends in warmup)"]
        )
    start = load.warmup if load.warmup is not None else measured[0].offset_ns
    assert start is not None  # a measured request has an offset
    end = start + load.duration if load.duration is not None else None
    return Plan(
        requests,
        start,
        end,
        warmup_ns=load.warmup,
        warmup_requests=load.warmup_requests,
        measured_requests=len(measured),
        dataset=dataset,
        prefix=prefix,
    )


def _open_loop(load, offsets: Iterator[int], source: RequestSource) -> Iterator[PlannedRequest]:
    n_warm = load.warmup_requests or 0
    window_start, measured = load.warmup, 0
    for index, offset in enumerate(offsets):
        warmup = offset < load.warmup if load.warmup is not None else index < n_warm
        if not warmup:
            if window_start is None:
                window_start = offset
            if load.requests is not None and measured >= load.requests:
                return
            if load.duration is not None and offset >= window_start + load.duration:
                return
            measured += 1
        yield source.next(index, offset, warmup)


def check_plan(scenario: Scenario, resolve: Callable[[str], Path]) -> None:
    """Everything ``build_plan`` would refuse, found without a model: datasets and traces are
    read (with a byte tokenizer: lengths differ, problems do not) and an open-loop plan is built
    to see that its window holds a request. ``ScenarioError`` with ``file:line`` otherwise."""
    build_plan(scenario, ByteTokenizer(), resolve)
