"""An engine's warm-up: every batch shape the run will use, run before t0 so that no compile or
first-use cost lands inside the measurement; timed, with what of it went to compiling graphs
and to garbage collection, and told to the harness."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from loadtest.backends.transformers import messages
from loadtest.backends.transformers.compiling import (
    batch_dynamic_while_warming,
    compile_seconds,
    marks_batch_dynamic,
)
from loadtest.backends.transformers.embedding import Loaded, embed_batch
from loadtest.backends.transformers.stamping import STREAMER, NullOut, nothing
from loadtest.config.transformers_spec import TransformersSpec
from loadtest.core.heap import GcPauses, collector_paused, settle_heap
from loadtest.core.json_types import ints_in

if TYPE_CHECKING:
    from loadtest.backends.transformers.padded_decode import PaddedDecode
    from loadtest.backends.transformers.stamping import Out

# Steps a warm-up generate() runs, one token each (the prefill's, then decode steps). Its cache
# is sized for the run's longest output (shorter outputs reuse a static cache; a longer one is a
# new cache, and a new graph inside the window), but after the first few steps the rest only
# repeat them: the first decode step compiles, CUDA graph trees warm it up and record it over
# the next, and every later step replays the recording: running to the whole output costs the
# warm-up time per batch size and builds nothing more (bench/investigations/warmup_steps.py).
WARM_STEPS = 8


class Warmed(Loaded, Protocol):
    """What a warm-up needs of its engine (``engine.Engine``): the model where it was loaded,
    and more."""

    @property
    def spec(self) -> TransformersSpec: ...

    @property
    def padded(self) -> PaddedDecode | None: ...

    @property
    def out(self) -> Out: ...

    @property
    def gc(self) -> GcPauses: ...

    stamp_source: str
    warming_dynamic: bool  # inside a warm-up that marks the batch dynamic

    def _generate(
        self,
        batch: list[messages.Req],
        cancelled: set[int],
        out: Out,
        finished: set[int],
        steps: int | None = None,
    ) -> int: ...


class Warmup:
    """The warm-up of one engine (its ``warmup``)."""

    def __init__(self, engine: Warmed) -> None:
        self.engine = engine

    def run(self, shapes: list) -> None:
        """Run every shape (batch size, prompt length, new tokens), timed (``timed``)."""
        engine = self.engine
        dynamic = bool(
            engine.spec.compile
            and engine.spec.mode == "static"
            and engine.padded is None
            and marks_batch_dynamic(engine.spec, ints_in(engine.info, "batch_buckets"))
        )
        engine.warming_dynamic = dynamic  # a tensor-parallel group's followers mark alike
        try:
            with (
                self.timed(),
                batch_dynamic_while_warming(engine.model) if dynamic else nothing(),
            ):
                self.shapes(shapes)
        finally:
            engine.warming_dynamic = False

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """The warm-up inside it: timed, and told to the harness with what of it went to
        compiling graphs and to garbage collection (a cold compile is most of a compiled
        warm-up). The heap is settled first (counted in the warm-up): the model load's objects
        out of the collector's reach, and the load's collections not the warm-up's. Inside, the
        collector is paused and the warm-up's garbage collected once at its end, which halves
        the collector's share of a cold compile (bench/investigations/warmup_parts.py). Nothing
        is told if the warm-up raises."""
        engine = self.engine
        t = time.monotonic()
        self.settle()
        compiled = compile_seconds()
        with collector_paused():
            yield
        if engine.device.type == "cuda":
            engine.torch.cuda.synchronize(engine.device)
            engine.torch.cuda.reset_peak_memory_stats(engine.device)
        settle_heap()  # the one collection of the warm-up's garbage, counted in its gc_s
        details = {
            "compile_s": round(compile_seconds() - compiled, 3),
            "gc_s": round(engine.gc.summary(reset=True)["total_ms"] / 1e3, 3),
        }
        engine.out.send(("warmed", round(time.monotonic() - t, 3), details))

    def shapes(self, shapes: list) -> None:
        """Each shape once, untimed: embeddings a forward pass, generation ``WARM_STEPS``."""
        engine = self.engine
        if engine.spec.api == "embeddings":  # a forward pass at each batch's size
            for batch_size, prompt_len, _ in shapes:
                fake: list = [("req", -1 - i, [[65] * prompt_len], 0) for i in range(batch_size)]
                embed_batch(engine, fake, NullOut())
            return
        for batch_size, prompt_len, new_tokens in shapes:
            fake = [
                messages.req(-1 - i, [65] * prompt_len, new_tokens, True, None)
                for i in range(batch_size)
            ]
            if engine._generate(fake, set(), NullOut(), set(), steps=WARM_STEPS):
                # Not one stamp per token: this transformers' loop does not call its stop check
                # the way AfterSyncStamps expects. Stamp from the streamer instead.
                engine.stamp_source = STREAMER
                engine.info["stamp_source"] = (
                    f"{STREAMER} (the after-sync hook miscounted in warm-up)"
                )

    def settle(self) -> None:
        """After warm-up: the heap frozen, and the collections so far (that one included) not
        counted as the run's."""
        settle_heap()
        self.engine.gc.summary(reset=True)
