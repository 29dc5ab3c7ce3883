"""From scenario to ``Plan``: every request of the run (what each asks for: ``requests``) and,
open loop, when it is sent; closed loop, the users and the budget they draw from.

Three seeded streams, one per random dimension (``seeds.schedule``, ``.prompts``, ``.lengths``),
so changing the arrival process never changes the prompts, and the same seeds always give a
byte-identical plan (``Plan.to_jsonl``). Everything is decided before t0.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from loadtest.config.arrivals import TraceArrival
from loadtest.config.scenario import Scenario
from loadtest.core.errors import ScenarioError
from loadtest.workload.arrivals import ClosedLoop, ThinkTime, make_arrival
from loadtest.workload.content import Content, load_content
from loadtest.workload.datasets import DatasetPrompt, DatasetRows, read_dataset
from loadtest.workload.media import MediaSet, require_pillow
from loadtest.workload.prompt_text import PromptText
from loadtest.workload.requests import PlannedRequest, RequestSource
from loadtest.workload.tokenizer import ByteTokenizer, Tokenizer
from loadtest.workload.traces import Trace, prefix_reuse


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
    # multi_turn: the think time between a reply and the session's next turn, and its stream
    turn_think: ThinkTime | None = None
    turn_think_rng: random.Random | None = None
    # closed loop: the request (and session) indexes this plan takes, ``start::step`` (a worker's)
    stride: tuple[int, int] = (0, 1)
    content: Content = field(default_factory=Content)  # tools and the answer's format
    media: MediaSet | None = None  # images and audio each request carries
    text: PromptText = field(default_factory=PromptText)  # how synthetic prompts are made
    trace: dict | None = None  # a replayed trace: its format and where lengths come from
    models: tuple[str, ...] = ()  # a model mix's names

    def describe(self) -> dict:
        """What the run's traffic is, as the result keeps it: the text, a trace's requests and
        prefix reuse, and (open loop) the measured requests each model and the cancellation
        were given."""
        out: dict = {"text": "natural" if self.text.natural else "random"}
        measured = [r for r in self.requests if not r.warmup]
        if self.trace is not None:
            out["trace"] = {
                **self.trace,
                "requests": len(self.requests),
                "prefix_reuse": prefix_reuse(self.requests, self.text.block_tokens),
            }
        if self.closed_loop is None:
            out["planned_cancel"] = sum(r.cancel for r in measured)
            models = Counter(r.model for r in measured if r.model is not None)
            if models:
                out["planned_models"] = dict(models)
        return out

    @property
    def multi_turn(self) -> bool:
        """Whether requests are turns of sessions."""
        return self.turn_think is not None

    def sessions(self) -> list[list[PlannedRequest]]:
        """An open-loop multi-turn plan's sessions, each its turns in order."""
        out: dict[int, list[PlannedRequest]] = {}
        for r in self.requests:
            assert r.session is not None  # every request of a multi-turn plan is a turn
            out.setdefault(r.session, []).append(r)
        return list(out.values())

    def longest_prompt(self, default: int = 128) -> int:
        """The longest prompt the plan can send, in tokens (open loop; ``default`` otherwise).
        A session's later turn holds its history: every earlier message and reply."""
        if not self.requests:
            return default
        if not self.multi_turn:
            return max(r.input_tokens for r in self.requests)
        return max(
            sum(t.input_tokens + t.output_tokens for t in turns) - turns[-1].output_tokens
            for turns in self.sessions()
        )

    def turn_message(self, req: PlannedRequest, tokenizer: Tokenizer) -> str:
        """The new user message a session's turn sends (its history is the runner's)."""
        if req.dataset_row is not None:
            assert self.dataset is not None
            row = self.dataset[req.dataset_row]
            return row.turns[req.turn] if row.turns else row.text
        return tokenizer.decode(self.prompt_ids(req, tokenizer, whole_prompt=False))

    def system_messages(self, req: PlannedRequest) -> list[dict]:
        """What a session's history starts with: its dataset row's system messages, if any."""
        if req.dataset_row is None or self.dataset is None:
            return []
        return list(self.dataset[req.dataset_row].system)

    def to_jsonl(self) -> str:
        """The plan as JSON lines (to compare two plans byte for byte)."""
        return "".join(json.dumps(asdict(r), separators=(",", ":")) + "\n" for r in self.requests)

    def prompt_ids(
        self, req: PlannedRequest, tokenizer: Tokenizer, whole_prompt: bool = True
    ) -> list[int]:
        """A request's prompt token ids: its dataset row, or its seeded random prompt. With
        ``whole_prompt`` the tokens a server adds around the text (``prompt_overhead``: a BOS,
        a chat template) are counted in ``input_tokens``, so the server's prompt is that long."""
        if req.dataset_row is not None:
            assert self.dataset is not None  # a dataset row only exists with a dataset
            return list(self.dataset[req.dataset_row].token_ids)
        n = req.input_tokens
        if whole_prompt:
            n = max(1, n - getattr(tokenizer, "prompt_overhead", 0))
        return self.text.ids(tokenizer, n, req.prompt_seed, req.blocks, req.prefix_group)

    def input_ids(self, req: PlannedRequest, tokenizer: Tokenizer) -> list[list[int]]:
        """Each text a multi-input request carries (embeddings' inputs; rerank's query, then
        its documents): the first is the request's prompt, the others seeded from it (or the
        dataset's next rows)."""
        first = self.prompt_ids(req, tokenizer)
        out = [first]
        for k in range(1, req.inputs):
            if req.dataset_row is not None:
                assert self.dataset is not None
                row = self.dataset[(req.dataset_row + k) % len(self.dataset)]
                out.append(list(row.token_ids))
            else:
                rng = random.Random(req.prompt_seed + k)
                out.append(tokenizer.sample_ids(rng, len(first), natural=self.text.natural))
        return out

    def share(self, worker: int, workers: int) -> Plan:
        """Worker ``worker`` of ``workers``' part of this plan; the parts together are the plan.

        Open loop: every ``workers``-th request in arrival order (a session and all its turns go
        to one worker), offsets unchanged, so the parts interleave into exactly the planned
        arrivals. Closed loop: the users are split (the first workers take one more when they do
        not divide) and each part takes the request indexes ``worker::workers`` of the shared
        budget. Each part's random streams (think times) are its own, derived from the plan's:
        parts seeded alike would move in lockstep.
        """
        if workers == 1:
            return self
        own = lambda rng: None if rng is None else _substream(rng, f"{worker}/{workers}")  # noqa: E731
        if self.closed_loop is None:
            if self.multi_turn:
                requests = [r for turns in self.sessions()[worker::workers] for r in turns]
            else:
                requests = self.requests[worker::workers]
            return replace(self, requests=requests, turn_think_rng=own(self.turn_think_rng))
        users = self.closed_loop.users
        return replace(
            self,
            closed_loop=replace(
                self.closed_loop, users=users // workers + (worker < users % workers)
            ),
            think_rng=own(self.think_rng),
            turn_think_rng=own(self.turn_think_rng),
            stride=(worker, workers),
        )

    @property
    def planned_count(self) -> int | None:
        """How many requests the plan sends (None for an open-ended closed loop)."""
        if self.closed_loop is None:
            return len(self.requests)
        if self.measured_requests is not None:
            return (self.warmup_requests or 0) + self.measured_requests
        return None


def _substream(rng: random.Random, label: str) -> random.Random:
    """A stream of its own, seeded from ``rng``'s state (left untouched) and ``label``."""
    copy = random.Random()
    copy.setstate(rng.getstate())
    return random.Random(f"{copy.getrandbits(64)}/{label}")


def build_plan(scenario: Scenario, tokenizer: Tokenizer, resolve: Callable[[str], Path]) -> Plan:
    """Every request of the run, fixed before t0 from the scenario's seeds."""
    load, w, spec = scenario.load, scenario.workload, scenario.load.arrival
    dataset = _dataset(scenario, tokenizer, resolve)
    arrival = make_arrival(spec, resolve, load.max_planned_requests)
    trace = arrival if isinstance(arrival, Trace) else None
    traced = trace is not None and isinstance(spec, TraceArrival) and spec.carries_lengths
    source = RequestSource(scenario, dataset, trace if traced else None)
    mt = w.multi_turn
    plan = Plan(
        [],
        None,
        None,
        warmup_ns=load.warmup,
        warmup_requests=load.warmup_requests,
        dataset=dataset,
        turn_think=None if mt is None else ThinkTime(mt.think_time, mt.think == "exponential"),
        # a stream of its own: think times never shift the arrivals or the prompts
        turn_think_rng=None if mt is None else random.Random(scenario.seeds.schedule * 7919 + 1),
        content=load_content(scenario, resolve),
        media=_media(scenario),
        text=_prompt_text(scenario),
        trace=None
        if not isinstance(spec, TraceArrival)
        else {"format": spec.format, "lengths": "trace" if traced else "workload"},
        models=tuple(w.models or ()),
    )
    schedule_rng = random.Random(scenario.seeds.schedule)
    if isinstance(arrival, ClosedLoop):
        return replace(
            plan,
            window_start_ns=load.warmup or 0 if load.warmup_requests is None else None,
            window_end_ns=None if load.duration is None else (load.warmup or 0) + load.duration,
            closed_loop=arrival,
            source=source,
            think_rng=schedule_rng,
            measured_requests=load.requests,
        )
    requests = list(
        _open_loop(load, arrival.offsets_ns(schedule_rng), source, multi_turn=mt is not None)
    )
    measured = [r for r in requests if not r.warmup]
    if not measured:
        raise ScenarioError(
            ["load: the plan holds no measured request (window empty, or the trace ends in warmup)"]
        )
    start = load.warmup if load.warmup is not None else measured[0].offset_ns
    assert start is not None  # a measured request has an offset
    end = start + load.duration if load.duration is not None else None
    return replace(
        plan,
        requests=requests,
        window_start_ns=start,
        window_end_ns=end,
        measured_requests=len(measured),
    )


def _prompt_text(scenario: Scenario) -> PromptText:
    w, seeds = scenario.workload, scenario.seeds
    sp = w.shared_prefix
    return PromptText(
        natural=w.text == "natural",
        # each group's prefix is seeded from the prompts seed: the same in every replicate
        prefix=None if sp is None else (sp.tokens, seeds.prompts * 1_000_003),
        block_tokens=getattr(scenario.load.arrival, "block_tokens", 512),
        block_seed=seeds.prompts,
    )


def _media(scenario: Scenario) -> MediaSet | None:
    """The images and audio each request carries, or None."""
    w = scenario.workload
    if w.images is None and w.audio is None:
        return None
    if w.images is not None:
        require_pillow()
    return MediaSet(w.images, w.audio, scenario.seeds.prompts)


def _dataset(
    scenario: Scenario, tokenizer: Tokenizer, resolve: Callable[[str], Path]
) -> DatasetRows | None:
    """The scenario's dataset read (its rows, or its conversations for sessions), or None."""
    w = scenario.workload
    if not w.dataset:
        return None
    return read_dataset(
        w.dataset,
        tokenizer,
        resolve=resolve,
        split=w.dataset_split,
        columns=w.dataset_columns,
        sessions=w.multi_turn is not None,
        max_rows=w.dataset_max_rows,
    )


def _open_loop(
    load, offsets: Iterator[int], source: RequestSource, multi_turn: bool
) -> Iterator[PlannedRequest]:
    """Open-loop requests in order; with ``multi_turn``, each arrival starts a session whose
    turns follow it (unplaced). Warm-up by count counts requests (turns), as does the window."""
    n_warm = load.warmup_requests or 0
    window_start, measured, index = load.warmup, 0, 0
    for session, offset in enumerate(offsets):
        warmup = offset < load.warmup if load.warmup is not None else index < n_warm
        if not warmup:
            if window_start is None:
                window_start = offset
            if load.requests is not None and measured >= load.requests:
                return
            if load.duration is not None and offset >= window_start + load.duration:
                return
        turns = (
            source.next_session(index, offset, warmup, session)
            if multi_turn
            else [source.next(index, offset, warmup)]
        )
        if not warmup and load.requests is not None:
            turns = turns[: load.requests - measured]  # the window ends with its Nth request
        measured += 0 if warmup else len(turns)
        index += len(turns)
        yield from turns


def check_plan(scenario: Scenario, resolve: Callable[[str], Path]) -> Plan:
    """Everything ``build_plan`` would refuse, found without a model: datasets and traces are
    read (with a byte tokenizer: lengths differ, problems do not) and an open-loop plan is built
    to see that its window holds a request. ``ScenarioError`` with ``file:line`` otherwise.
    Returns that plan: its schedule and counts are the run's (its prompt lengths may not be)."""
    return build_plan(scenario, ByteTokenizer(), resolve)
