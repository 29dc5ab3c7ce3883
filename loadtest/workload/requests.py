"""What each planned request asks for: its lengths, its prompt (a seed, a dataset row, trace
blocks), its model and whether the client cancels it, drawn in order from the scenario's seeds
whatever the timing (``RequestSource``), so changing the arrival process never changes them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from loadtest.config.scenario import Scenario
from loadtest.config.workload import FixedLength, LognormalLength, NormalLength, UniformLength
from loadtest.workload.datasets import DatasetPrompt
from loadtest.workload.traces import Trace


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
    session: int | None = None  # multi_turn: the session this turn belongs to
    turn: int = 0  # multi_turn: the turn's place in its session (0 = the first)
    # multi_turn: the conversation so far, this turn's message last; set when the turn is sent
    # (it holds the earlier replies), and then ``input_tokens`` counts the whole history
    history: tuple[dict, ...] | None = None
    # texts the request carries, each ``input_tokens`` long: an embeddings request's inputs,
    # a rerank request's query and documents
    inputs: int = 1
    # a Mooncake trace's request: the hash ids of its prompt's blocks (``PromptText.block_tokens``
    # each); requests whose blocks start alike share exactly that prefix
    blocks: tuple[int, ...] | None = None
    model: str | None = None  # a model mix: the served model this request goes to
    cancel: bool = False  # load.cancel: the client cancels this request mid-stream
    # set by the runner as it sends a request the plan cancels: when (clock ns) or after how
    # many tokens; a backend that reads its stream in one go stops itself there
    stop_at_ns: int | None = None
    stop_after_tokens: int | None = None
    # answers: its answer's text comes back with its end (the reference pass, and its twin
    # under load), to be compared
    keep_answer: bool = False


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


class RequestSource:
    """The deterministic sequence of request contents (lengths, prompts), independent of timing."""

    def __init__(
        self, scenario: Scenario, dataset: list[DatasetPrompt] | None, trace: Trace | None = None
    ) -> None:
        w = scenario.workload
        self._trace = trace  # a trace whose rows give each request's lengths (and blocks)
        self._lengths = random.Random(scenario.seeds.lengths)
        self._prompts = random.Random(scenario.seeds.prompts)
        self._input = None if dataset else _sampler(w.input_tokens)
        self._prefix = w.shared_prefix
        self._output = _sampler(w.output_tokens)
        self._dataset = dataset
        self._order: list[int] = []
        self._ignore_eos = w.output == "fixed"
        self._inputs = inputs_per_request(scenario)
        mt = w.multi_turn
        self._turns = None if mt is None else _sampler(3 if mt.turns is None else mt.turns)
        self._max_turns = None if mt is None else mt.max_turns
        # streams of their own: a mix or a cancellation never shifts the lengths or prompts
        models = w.models or {}
        self._models, self._weights = list(models), list(models.values())
        self._model_rng = random.Random(f"{scenario.seeds.prompts}/models")
        cancel = scenario.load.cancel
        self._cancel = 0.0 if cancel is None else cancel.fraction
        self._cancel_rng = random.Random(f"{scenario.seeds.schedule}/cancel")

    def _model(self) -> str | None:
        if not self._models:
            return None
        return self._model_rng.choices(self._models, self._weights)[0]

    def _cancelled(self) -> bool:
        return bool(self._cancel) and self._cancel_rng.random() < self._cancel

    def next(self, index: int, offset_ns: int | None, warmup: bool) -> PlannedRequest:
        """The next request's contents (lengths, prompt), whatever its timing."""
        out = self._output(self._lengths)
        blocks = None
        if self._trace is not None:  # the trace's row, drawn with this request's offset
            traced = self._trace.rows[index]
            assert traced.input_tokens is not None and traced.output_tokens is not None
            n_in, out, row, blocks = traced.input_tokens, traced.output_tokens, None, traced.blocks
        elif self._dataset is None:
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
            index, offset_ns, n_in, out, seed, row, warmup, self._ignore_eos, group,
            inputs=self._inputs, blocks=blocks, model=self._model(), cancel=self._cancelled(),
        )  # fmt: skip

    def next_session(
        self, index: int, offset_ns: int | None, warmup: bool, session: int
    ) -> list[PlannedRequest]:
        """A multi-turn session's turns, indexed from ``index``: the first at ``offset_ns``, the
        others unplaced (each is sent after the previous reply). A turn's ``input_tokens`` is its
        own new message until it is sent; its prompt is then the whole history."""
        first = self.next(index, offset_ns, warmup)
        if self._dataset is not None:
            assert first.dataset_row is not None
            row = self._dataset[first.dataset_row]
            count = max(1, len(row.turns))
            first = replace(
                first, input_tokens=row.turn_tokens[0] if row.turns else first.input_tokens
            )
        else:
            assert self._turns is not None and self._input is not None
            row, count = None, self._turns(self._lengths)
        if self._max_turns is not None:
            count = min(count, self._max_turns)
        turns = [replace(first, session=session)]
        for k in range(1, count):
            out = self._output(self._lengths)
            n_in = row.turn_tokens[k] if row is not None else self._input(self._lengths)  # type: ignore[misc]
            seed = self._prompts.getrandbits(63)
            turns.append(
                PlannedRequest(
                    index + k,
                    None,
                    n_in,
                    out,
                    seed,
                    first.dataset_row,
                    warmup,
                    self._ignore_eos,
                    None,
                    session,
                    k,
                    model=first.model,  # a session stays with its model
                    cancel=self._cancelled(),
                )
            )
        return turns


def inputs_per_request(scenario: Scenario) -> int:
    """Texts each request carries: an embeddings request's inputs, a rerank request's query
    and its documents, else one prompt."""
    api = getattr(scenario.backend, "api", None)
    w = scenario.workload
    if api == "embeddings":
        return w.inputs_per_request or 1
    if api == "rerank":
        return 1 + (w.documents or 1)
    return 1
