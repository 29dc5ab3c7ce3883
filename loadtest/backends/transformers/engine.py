"""The engine: the loaded model, the static batcher and its bookkeeping, inside the worker
process. It forms batches from the inbox, decodes each one, padded: through the pipelined
loop (decode_loop.py, padded compiled batches) or one generate() with its tokens stamped after
each step's device sync (stamping.py); it warms up every shape the run will use,
opens and closes profiler windows between steps, and reports its facts (steps for the roofline,
garbage-collector pauses, compiled graphs, peak memory).
"""

from __future__ import annotations

import queue
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from loadtest.backends.transformers import messages
from loadtest.backends.transformers.batch_inputs import generate_kwargs, left_padded
from loadtest.backends.transformers.batcher import next_batch
from loadtest.backends.transformers.compiling import (
    batching_details,
    compiled_graphs,
)
from loadtest.backends.transformers.decode_loop import PIPELINED, PipelinedDecode
from loadtest.backends.transformers.embedding import embed_batch
from loadtest.backends.transformers.engine_facts import engine_facts
from loadtest.backends.transformers.padded_decode import PaddedDecode
from loadtest.backends.transformers.stamping import (
    AFTER_SYNC,
    AfterSyncStamps,
    NullOut,
    Out,
    StepStreamer,
    choose_stamp_source,
    nothing,
)
from loadtest.backends.transformers.warmup import Warmup
from loadtest.config.transformers_spec import TransformersSpec
from loadtest.core.heap import process_gc_pauses
from loadtest.core.step_accounting import StepAccounting

if TYPE_CHECKING:
    from torch import Tensor

    from loadtest.backends.transformers.layout import Layout
    from loadtest.backends.transformers.profiling import WorkerProfiler


class StopAfterSteps:
    """A stopping criterion for generate(): done after ``steps`` tokens, every row. Plain
    and picklable: tensor-parallel followers receive it with the generate() call it stops."""

    def __init__(self, steps: int) -> None:
        self.steps, self.seen = steps, 0

    def __call__(self, input_ids: Tensor, scores: Tensor, **kwargs: object) -> Tensor:
        self.seen += 1
        return input_ids.new_full((input_ids.shape[0],), self.seen >= self.steps).bool()


class Engine:
    """The loaded model, the static batcher and its bookkeeping, in the worker process."""

    def __init__(
        self,
        spec: TransformersSpec,
        base_dir: str,
        out: Out,
        loaded: tuple | None = None,
        layout: Layout | None = None,
    ) -> None:
        """``loaded``: (model, device, info) already loaded (bench/investigations/overhead_split.py drives this
        engine's own generate path on a model it compiled once). ``layout``: this engine is
        rank 0 of a tensor-parallel group, whose followers run each generate() it announces."""
        import torch

        from loadtest.backends.transformers.loading import load_model

        self.spec, self.out, self.torch = spec, out, torch
        t = time.monotonic()
        self.model, self.device, self.info = loaded or load_model(spec, base_dir, layout)
        self.padded = PaddedDecode(self.model) if self.info.get("pad_decode") else None
        self.loop = (
            PipelinedDecode(self.model, self.padded)
            if self.padded is not None and self.info.get("decode_loop") == "pipelined"
            else None
        )
        self.lockstep = None
        self.warming_dynamic = False  # inside a warm-up that marks the batch dynamic
        if layout is not None and layout.size > 1:
            from loadtest.backends.transformers.parallel import Lockstep, control_group

            self.lockstep = Lockstep(control_group())
        self.info["load_s"] = round(time.monotonic() - t, 3)
        self.stamp_source = PIPELINED if self.loop else choose_stamp_source(self.device)
        self.info["stamp_source"] = self.stamp_source
        # batches since the last facts whose stamp count differed from their tokens
        self.stamp_mismatches = 0
        self.batches = 0
        self._batches_reported = 0
        self.acct = StepAccounting()
        self.gc = process_gc_pauses()
        self.profiler: WorkerProfiler | None = None  # while a capture window is open
        # (profiler, out_dir): a closed window, exported at the end of the run
        self.pending_export: tuple[WorkerProfiler, str] | None = None
        self.urgent: deque = deque()  # checked every decode step: emptiness takes no lock
        # Called with (engine, batch number) before each batch runs (engine hooks install them).
        self.before_batch: list = []
        self.graphs_at_window: int | None = None  # compiled graphs when the window opened
        self.warmup = Warmup(self)

    # -- the loop -----------------------------------------------------------------------------

    def serve(self, inbox: queue.Queue, cancelled: set) -> None:
        """Run the batches the inbox forms (``batcher.next_batch``) until stopped."""
        while (batch := next_batch(inbox, self.spec, self.handle_control)) is not None:
            batch = [r for r in batch if r[1] not in cancelled]
            if batch:
                self._run_batch(batch, cancelled)
        if self.lockstep is not None:
            self.lockstep.finish()
        self.out.send(("stopped", engine_facts(self)))

    def handle_control(self, msg: messages.Inbound) -> bool:
        """warmup / configure / facts / bare: True when ``msg`` was one of them."""
        if msg[0] == "warmup":
            self.warmup.run(msg[1])
        elif msg[0] == "configure":
            wanted = {"max_batch_size": msg[1], "max_wait_ms": msg[2]}
            self.spec = self.spec.model_copy(update=wanted)
            self.info.update(batching_details(self.spec, self.padded is not None))
        elif msg[0] == "facts":
            self.out.send(("facts", engine_facts(self, reset=True)))
        elif msg[0] == "call":
            try:
                self.out.send(("called", resolve_hook(msg[1])(self, *msg[2])))
            except Exception as exc:
                self.out.send(("call_failed", f"{msg[1]}: {type(exc).__name__}: {exc}"))
        elif msg[0] == "urgent":
            self.poll_urgent()
        else:
            return False
        return True

    def _after_step(self) -> None:
        self.poll_urgent()
        if self.profiler is not None:
            self.profiler.decode_step()

    def poll_urgent(self) -> None:
        """Profiler on/off now (between batches, or between two decode steps of one). Exporting
        the trace waits for the end of the run (``engine_facts``): it takes seconds."""
        while self.urgent:
            msg = self.urgent.popleft()
            if msg[0] == "profile_start" and self.profiler is None:
                from loadtest.backends.transformers.profiling import WorkerProfiler

                self.profiler = WorkerProfiler(self.torch, self.device, msg[1])
                self.profiler.start()
                self.out.send(("profiling", time.monotonic_ns()))
            elif msg[0] == "window_start":  # the measurement window opened: count from here
                self.acct = StepAccounting()  # steps handed over from now on count in this one
                self.gc.summary(reset=True)
                self.graphs_at_window = compiled_graphs()
            elif msg[0] == "profile_stop":
                if self.profiler is not None:
                    self.profiler.stop_capture()
                    self.pending_export = (self.profiler, msg[1])
                    self.profiler = None
                self.out.send(("profile_stopped", time.monotonic_ns()))

    def _run_batch(self, batch: list, cancelled: set) -> None:
        torch = self.torch
        rids = [r[1] for r in batch]
        finished: set = set()  # rows already reported done: a late failure spares them
        self.out.send(messages.admitted(time.monotonic_ns(), rids))
        self.batches += 1
        try:
            for hook in self.before_batch:
                hook(self, self.batches)
            if self.spec.api == "embeddings":
                embed_batch(self, batch, self.out)
            else:
                self.stamp_mismatches += self._generate(batch, cancelled, self.out, finished)
        except torch.OutOfMemoryError as exc:
            self._fail_rest(rids, finished, "CudaOOM", str(exc)[:200])
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self._unless_split()
        except Exception as exc:
            self._fail_rest(rids, finished, type(exc).__name__, str(exc)[:200])
            self._unless_split()

    def _unless_split(self) -> None:
        """A step that failed on rank 0 left the other ranks inside a collective: the group
        cannot go on, so the engine stops here (the run ends with what it measured)."""
        if self.lockstep is not None:
            raise RuntimeError(
                "a batch failed on rank 0 of the tensor-parallel group; the ranks cannot resume"
            )

    def _fail_rest(
        self, rids: list[int], finished: set[int], error_type: str, message: str
    ) -> None:
        """Fail the rows not yet reported done, after the outbox has processed the batch's steps."""
        t = time.monotonic_ns()

        def failed() -> list[messages.Outbound]:
            pending = [rid for rid in rids if rid not in finished]
            return [messages.failed(t, pending, error_type, message)] if pending else []

        self.out.call(failed)

    def _generate(
        self,
        batch: list[messages.Req],
        cancelled: set[int],
        out: Out,
        finished: set[int],
        steps: int | None = None,
    ) -> int:
        """Decode the batch, padded: the pipelined loop where the engine has one, else one
        generate() (at most ``steps`` tokens, its cache sized for the batch's whole output all
        the same); returns 1 if generate()'s step stamps differed in number from the tokens it
        returned, else 0 (the pipelined loop stamps every step it reads: always 0)."""
        torch = self.torch
        ids, mask, width = left_padded(torch, batch, self.info)
        real = not isinstance(out, NullOut)
        # A step counts for the roofline in the accounting current when it is handed over (the
        # window's, once it opened), and not while a profiler is on: its overhead is not the model's.
        streamer = StepStreamer(
            batch,
            out,
            cancelled,
            finished,
            width,
            self._after_step if real else None,
            accounting=(lambda: self.acct if self.profiler is None else None) if real else None,
        )
        label = None if self.profiler is None else f"loadtest batch {[r[1] for r in batch]}"
        if self.loop is not None:
            self._decode_pipelined(self.loop, batch, ids, mask, streamer, steps, label)
            return 0
        kwargs = generate_kwargs(
            self.spec,
            self.info,
            self.padded,
            width,
            max(r[3] for r in batch),
            all(r[4] for r in batch),
            batch[0][5],
        )
        if steps is not None:
            from transformers import StoppingCriteriaList

            kwargs["stopping_criteria"] = StoppingCriteriaList([StopAfterSteps(steps)])
        hook = None
        if self.stamp_source == AFTER_SYNC:
            hook = AfterSyncStamps(torch, streamer)
        else:
            kwargs["streamer"] = streamer
        if self.lockstep is not None:  # every rank runs this generate(), with these inputs
            shape = self.padded.shape if self.padded is not None else None
            self.lockstep.announce(ids, mask, kwargs, shape, self.warming_dynamic)
        ids, mask = ids.to(self.device), mask.to(self.device)
        with (
            torch.inference_mode(),
            self.profiler.annotate(label) if label and self.profiler else nothing(),
        ):
            if hook is not None:
                hook.install()
                streamer.start(time.monotonic_ns())
            try:
                sequences = self.model.generate(input_ids=ids, attention_mask=mask, **kwargs)
            finally:
                if hook is not None:
                    hook.remove()
        if self.profiler is not None:
            self.profiler.end_steps()
        streamer.close_rest()
        generated = sequences.shape[-1] - width
        return 0 if hook is None or hook.stamps == generated else 1

    def _decode_pipelined(
        self,
        loop: PipelinedDecode,
        batch: list[messages.Req],
        ids: Tensor,
        mask: Tensor,
        streamer: StepStreamer,
        steps: int | None,
        label: str | None,
    ) -> None:
        """The batch through the pipelined loop (decode_loop.py): every step stamped, so the
        stamps are the tokens by construction."""
        caps = [r[3] for r in batch]
        eos = None if all(r[4] for r in batch) else batch[0][5]
        eos_ids = [eos] if isinstance(eos, int) else eos
        plan = (caps, eos_ids, min(steps or max(caps), max(caps)))
        loop.padded.generate_kwargs(self.info["decode_batch_size"], ids.shape[1] + max(caps))
        if self.lockstep is not None:  # every rank runs this decode, with these inputs
            self.lockstep.announce_decode(ids, mask, plan, loop.padded.shape)
        ids, mask = ids.to(self.device), mask.to(self.device)
        with self.profiler.annotate(label) if label and self.profiler else nothing():
            streamer.start(time.monotonic_ns())
            loop.run(ids, mask, *plan, stamp=streamer.step)
        if self.profiler is not None:
            self.profiler.end_steps()
        streamer.close_rest()


def resolve_hook(target: str) -> Callable[..., object]:
    """``"package.module:function"`` -> the function (an engine hook)."""
    import importlib

    module, _, name = target.partition(":")
    if not module or not name:
        raise ValueError(f"engine hook {target!r}: expected module:function")
    return getattr(importlib.import_module(module), name)
