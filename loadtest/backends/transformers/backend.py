"""``kind: transformers``: a local Hugging Face model driven through an engine worker process.

The harness side: spawns the worker, sends requests down one pipe, and a reader thread turns
the worker's per-step messages into events for each request's async iterator (one
``call_soon_threadsafe`` per message the worker writes — a few decode steps — not per token).
If the worker dies, every request in flight fails with ``BackendError`` and the run ends with
what it measured.

Nothing here can hang on the worker: messages to it go through a sender thread (a stopped worker
fills the pipe, and a blocking write would freeze the event loop and every signal handler with
it); every reply is awaited with a deadline; a request's events are bounded by the runner's
``load.stall_timeout``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable
from multiprocessing.context import SpawnProcess

from loadtest.backends.base import Backend, BackendContext, BackendInfo, Facts
from loadtest.backends.transformers import messages
from loadtest.backends.transformers.compiling import batching_details
from loadtest.backends.transformers.followers import Followers
from loadtest.backends.transformers.pipe import DEATH, WorkerPipe
from loadtest.config.observing import Profile
from loadtest.config.transformers_spec import TransformersSpec
from loadtest.core.clock import Clock
from loadtest.core.errors import BackendError
from loadtest.core.events import BackendEvent, Cancelled, Failed, Finished
from loadtest.core.json_types import text_in
from loadtest.workload.plan import Plan
from loadtest.workload.requests import PlannedRequest
from loadtest.workload.tokenizer import Tokenizer

# how long a killed engine process may take to be gone (a busy machine reaps slowly)
KILLED_EXIT_S = 30.0
REPLY_TIMEOUT_S = 10.0  # facts, profiler, stop: the worker answers these between decode steps


class TransformersBackend(Backend[TransformersSpec]):
    """A local transformers model in a spawned engine worker process."""

    needs_prompt_ids = True
    supports_profiling = True
    # ``module:function`` callables the engine worker calls with its Engine once the model is
    # loaded: the hook for code that must run beside the model (tests install faults with it).
    # Set from Python only; a scenario file cannot name code to run.
    engine_hooks: tuple[str, ...] = ()

    def __init__(
        self,
        spec: TransformersSpec,
        clock: Clock,
        context: BackendContext | None = None,
        group: tuple[str, ...] | None = None,
        processes: int = 1,
        label: str = "",
        first: int = 0,
    ) -> None:
        """``group``: the devices of this engine (several: a tensor-parallel group, a process
        each); default, the spec's one. ``processes``: engine processes of the whole run,
        ``first`` the index of this engine's first among them. ``label`` ends its processes'
        names (``-replica1``)."""
        super().__init__(spec, clock, context)
        self.label = label
        self.group: tuple[str, ...] = tuple(group or spec.device_groups()[0])
        self.processes = max(processes, len(self.group))
        self.first = first
        self._followers = Followers(self._on_follower_exit)
        self._stopping = False
        self.base_dir = str(self.context.base_dir)
        self._start_s = spec.start_timeout / 1e9
        self._proc: SpawnProcess | None = None
        self._pipe = WorkerPipe()
        self._ready = False
        self._info: Facts = {}  # what the worker reported when ready
        self._plan: Plan | None = (
            None  # kept at prepare(): an embeddings request's texts come from it
        )

    async def start(self) -> BackendInfo:
        import multiprocessing as mp

        from loadtest.backends.hf_tokenizer import load_tokenizer
        from loadtest.backends.transformers.layout import Layout
        from loadtest.backends.transformers.worker import main

        ctx = mp.get_context("spawn")  # never fork a process that may hold a CUDA context
        port = _free_port() if len(self.group) > 1 else 0
        layouts = [
            Layout(rank, len(self.group), self.group, port, self.processes, self.first + rank)
            for rank in range(len(self.group))
        ]
        to_worker_r, from_worker_w = self._pipe.open(ctx, self.label)
        self._proc = ctx.Process(
            target=main,
            args=(
                to_worker_r,
                from_worker_w,
                self.spec,
                self.base_dir,
                tuple(self.engine_hooks),
                layouts[0],
            ),
            daemon=True,
            name=f"loadtest-engine{self.label}",
        )
        self._proc.start()
        to_worker_r.close()
        from_worker_w.close()
        self._loop = asyncio.get_running_loop()
        for layout in layouts[1:]:
            self._followers.start(ctx, self._loop, self.spec, self.base_dir, layout, self.label)
        tokenizer = await self._loop.run_in_executor(
            None, _one_at_a_time, load_tokenizer, self.spec, self.base_dir
        )
        self._pipe.listen(self._proc, self.label)
        msg = await self._pipe.reply_within("loading the model", self._start_s)
        if msg is DEATH or msg[0] == "load_failed":
            detail = self._pipe.dead if msg is DEATH else msg[1]
            await self.stop()
            raise BackendError(f"engine worker could not load {self.spec.model!r}: {detail}")
        info: Facts = msg[1]
        self._info = info
        self._ready = True
        self.tokenizer = tokenizer
        where = (
            info["device"]
            if len(self.group) == 1
            else f"TP{len(self.group)} on " + ",".join(self.group)
        )
        name = f"transformers:{self.spec.model} ({self.spec.mode}, {where}, {info['dtype']})"
        info["tokenizer"] = getattr(tokenizer, "name", type(tokenizer).__name__)
        return BackendInfo(name, tokenizer, info)

    @property
    def cpus(self) -> str | None:
        """The CPUs this engine's (rank 0's) process runs on, as the worker reported them."""
        return text_in(self._info, "cpus")

    async def prepare(self, plan: Plan) -> Facts:
        """Warm up every batch shape the run will use, before t0; returns how long it took."""
        self._plan = plan
        sizes, longest, new_tokens = warmup_shapes(self.spec, self._info, plan)
        warmup: messages.Warmup = ("warmup", [(bs, longest, new_tokens) for bs in sizes])
        self._pipe.send(warmup)
        msg = await self._pipe.reply_within("warm-up", self._start_s)
        if msg is DEATH:
            raise BackendError(f"engine worker died during warm-up: {self._pipe.dead}")
        details = msg[2]
        return {
            "warmup_s": msg[1],
            "warmup_compile_s": details["compile_s"],
            "warmup_gc_s": details["gc_s"],
            "warmup_batch_sizes": sizes,
        }

    async def call_in_engine(self, target: str, *args: object, timeout_s: float = 600.0) -> object:
        """``function(engine, *args)`` in the worker, for ``target = "module:function"``, and its
        (picklable) result: the hook bench/ uses to time code beside the loaded model. Between
        runs only."""
        if self._pipe.dead:
            raise BackendError(self._pipe.dead)
        call: messages.Call = ("call", target, args)
        self._pipe.send(call)
        msg = await self._pipe.reply_within(target, timeout_s)
        if msg is DEATH:
            raise BackendError(f"engine worker died in {target}: {self._pipe.dead}")
        if msg[0] == "call_failed":
            raise BackendError(msg[1])
        return msg[1]

    async def submit(
        self, req: PlannedRequest, prompt_ids: list[int] | None
    ) -> AsyncGenerator[BackendEvent | Cancelled, None]:
        if self._pipe.dead:
            raise BackendError(self._pipe.dead)
        assert prompt_ids is not None  # needs_prompt_ids: the runner tokenizes for this backend
        q: asyncio.Queue = asyncio.Queue()
        rid = req.index
        self._pipe.queues[rid] = q
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if self.spec.api == "embeddings":  # every text the request carries; nothing generated
            texts = self._plan.input_ids(req, self.tokenizer) if self._plan else [prompt_ids]
            embed: messages.Req = ("req", rid, texts, 0, True, None)  # type: ignore[assignment]
            self._pipe.send(embed)
        else:
            self._pipe.send(messages.req(rid, prompt_ids, req.output_tokens, req.ignore_eos, eos))
        finished = False
        try:
            while True:
                # Cannot hang: the worker's death puts DEATH on every queue, the runner's
                # watchdog cancels a request with no event for load.stall_timeout (always set),
                # and the drain deadline cancels whatever is left.
                ev = await q.get()
                if ev is DEATH:
                    raise BackendError(self._pipe.dead or "engine worker died")
                yield ev
                if type(ev) in (Finished, Failed):
                    finished = True
                    return
        finally:
            self._pipe.queues.pop(rid, None)
            if not finished and not self._pipe.dead:
                try:
                    cancel: messages.Cancel = ("cancel", rid)
                    self._pipe.send(cancel)
                except OSError:
                    pass

    HOT_FIELDS = {"max_batch_size", "max_wait_ms"}

    async def reconfigure(self, spec: TransformersSpec) -> bool:
        """Take a new batcher size/wait live (static and single modes); False: reload needed."""
        changed = {k for k in type(spec).model_fields if getattr(spec, k) != getattr(self.spec, k)}
        if self._pipe.dead or self.spec.mode == "continuous" or not changed <= self.HOT_FIELDS:
            return False
        configure: messages.Configure = ("configure", spec.max_batch_size, spec.max_wait_ms)
        self._pipe.send(configure)
        self.spec = spec
        # the worker's, computed alike
        self._info.update(batching_details(spec, self._info.get("pad_decode") is True))
        return True

    def window_started(self) -> None:
        """The measurement window opened: the worker's step accounting starts over."""
        if not self._pipe.dead:
            self._pipe.send(messages.WINDOW_START)

    async def profile_start(self, options: Profile) -> str | None:
        """torch.profiler on in the worker, at its next decode step (or at once when idle)."""
        if self._pipe.dead:
            return "the engine worker died"
        start: messages.ProfileStart = ("profile_start", options)
        self._pipe.send(start)
        msg = await self._pipe.reply_within("profile start", REPLY_TIMEOUT_S)
        return "the engine worker died" if msg is DEATH else None

    async def profile_stop(self, out_dir: str) -> Facts:
        """Profiler off (at the next decode step); the worker exports trace.json.gz there and the
        top operators with its end-of-point facts (``profile_export``), after the run."""
        if self._pipe.dead:
            return {"profiler": "engine worker died during the window"}
        stop: messages.ProfileStop = ("profile_stop", str(out_dir))
        self._pipe.send(stop)
        msg = await self._pipe.reply_within("profile stop", REPLY_TIMEOUT_S)
        return {"profiler": "engine worker died during the window"} if msg is DEATH else {}

    async def point_facts(self) -> Facts:
        """Peak memory and batches since the last call (the worker resets its peak counter)."""
        if self._pipe.dead:
            return {}
        self._pipe.send(messages.FACTS)
        msg = await self._pipe.reply_within("facts", REPLY_TIMEOUT_S)
        return {} if msg is DEATH else msg[1]

    async def stop(self) -> Facts:
        facts: dict = {}
        self._stopping = True
        if self._proc is None:
            return facts
        if self._proc.is_alive() and not self._pipe.dead and self._ready:
            try:
                self._pipe.send(messages.STOP)
                msg = await self._pipe.reply_within("stop", REPLY_TIMEOUT_S)
                if msg is not DEATH and msg[0] == "stopped":
                    facts = msg[1]
            except BackendError:
                pass
            await asyncio.to_thread(self._proc.join, 5)
        if self._proc.is_alive():  # wedged, still loading, or slow to exit
            self._proc.kill()  # the kernel ends it; a loaded machine may take seconds to reap
            await asyncio.to_thread(self._proc.join, KILLED_EXIT_S)
        await self._followers.stop()  # rank 0's stop reached them, unless it died first
        self._pipe.close()
        return facts

    def _on_follower_exit(self, rank: int, exitcode: int | None, words: str | None) -> None:
        """A rank that leaves before the end takes the group with it: rank 0 is stuck in a
        collective it will never finish, so it is ended too, and every request fails."""
        if self._stopping or self._pipe.dead:
            return
        why = words or f"exit code {exitcode}"
        self._pipe.dead = f"tensor-parallel rank {rank} of {len(self.group)} exited: {why}"
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()


def warmup_shapes(spec: TransformersSpec, info: Facts, plan: Plan) -> tuple[list[int], int, int]:
    """The batch sizes a warm-up runs, at the plan's longest prompt, for how many new tokens."""
    longest = plan.longest_prompt()
    # The static batcher can form any size up to max_batch_size: each is a new shape (a
    # compile, or in eager mode first-use costs such as attention plans). ``continuous`` warms
    # by running max_batch_size requests through the manager at once.
    sizes = {
        "single": [1],
        "static": list(range(1, spec.max_batch_size + 1)),
        "continuous": [spec.max_batch_size],
    }[spec.mode]
    buckets = info.get("batch_buckets")
    if isinstance(buckets, list) and buckets:
        sizes = [b for b in buckets if isinstance(b, int)]  # static batches run at these only
    new_tokens = 4
    if spec.compile:
        # A static cache is compiled for its length (prompt + new tokens): warm up with the
        # run's own, or the first real batch recompiles inside the measurement (seconds).
        new_tokens = (
            max((r.output_tokens for r in plan.requests), default=128) if plan.requests else 128
        )
    return sizes, longest, new_tokens


_TOKENIZER_LOCK = threading.Lock()


def _one_at_a_time(
    load_tokenizer: Callable[[str, str, bool], Tokenizer], spec: TransformersSpec, base_dir: str
) -> Tokenizer:
    """Replicas load their tokenizers on threads at once; transformers' lazy imports are not
    safe to run concurrently (an attribute can be missing halfway), so one at a time."""
    with _TOKENIZER_LOCK:
        return load_tokenizer(spec.model, base_dir, spec.trust_remote_code)


def _free_port() -> int:
    """A free TCP port on loopback for the group's rendezvous."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
