"""The engine worker process: loads the model, batches requests, stamps tokens on the host.

Runs in its own process (spawned): a Python ``generate()`` loop holds the GIL and would delay
the harness's dispatch, and a process isolates a CUDA OOM or crash. Protocol (tuples over two
one-way pipes):

    in : ("req", rid, prompt_ids, max_new, ignore_eos, eos_id) | ("cancel", rid) | ("warmup", shapes) | ("stop",)
         | ("bare", batch_size, prompt_len, new_tokens, reps)   # the reference loop, no harness (bench/)
    out: ("ready", info) | ("admitted", t_ns, [rid]) | ("tokens", (t_ns, ...), [rid])   # a run of decode steps: each rid got one token at each stamp
         | ("stamps", [(rid, (t_ns, ...)), ...])   # continuous mode: per-token stamps, one message per poll
         | ("done", t_ns, rid, n) | ("failed", t_ns, [rid], type, message) | ("warmed", seconds) | ("stopped", facts)
         | ("bare_done", [seconds, ...])
         | ("many", [msg, ...])   # several of the above in one write (see outbox.py)

Every token stamp is ``time.monotonic_ns()`` taken in this process when the decode step that
produced the token is done and the host knows it: right after generate()'s own per-step device
synchronisation (AfterSyncStamps), or in the streamer fallback right after the tokens were copied
to the host. Messages are built and written by the outbox's thread, off the decode loop.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import traceback
from collections import deque

from loadtest.backends.transformers.outbox import Outbox
from loadtest.core.heap import process_gc_pauses, settle_heap

STOP = ("stop",)


def main(inbox_conn, outbox_conn, spec: dict, base_dir: str) -> None:
    import sys

    # The generate() loop holds the GIL; the pipe reader needs it for every message. At the
    # default 5 ms switch interval a burst of requests trickles in one per 5 ms and batches start
    # half empty; 0.5 ms lets the reader keep up.
    sys.setswitchinterval(0.0005)
    out = Outbox(outbox_conn)
    try:
        _serve(inbox_conn, out, spec, base_dir)
    finally:
        out.close()


def _serve(inbox_conn, out: Outbox, spec: dict, base_dir: str) -> None:
    try:
        engine = Engine(spec, base_dir, out)
    except Exception as exc:  # load failure: say why, then exit
        out.send(("load_failed", f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=5)))
        return
    inbox: queue.Queue = queue.Queue()
    cancelled: set = set()
    threading.Thread(
        target=_pump, args=(inbox_conn, inbox, cancelled, engine.urgent), daemon=True
    ).start()
    if spec["mode"] == "continuous":
        from loadtest.backends.transformers.continuous import ContinuousEngine

        try:
            served = ContinuousEngine(engine)
        except Exception as exc:
            out.send(
                (
                    "load_failed",
                    f"continuous batching manager: {type(exc).__name__}: {exc}",
                    traceback.format_exc(limit=5),
                )
            )
            return
        engine.info["continuous"] = {
            k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
            for k, v in served.settings.items()
        }
        engine.info["stamp_source"] = served.stamp_source
    else:
        served = engine
    out.send(("ready", engine.info))
    served.serve(inbox, cancelled)


def _pump(conn, inbox: queue.Queue, cancelled: set, urgent: deque) -> None:
    """Reads the parent's pipe into a queue the engine can poll with a timeout. Profiler commands
    also go to ``urgent``, which the engine checks at every decode step: a capture window opens and
    closes on time even in the middle of a long batch."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            inbox.put(STOP)
            return
        if msg[0] == "cancel":
            cancelled.add(msg[1])
        elif msg[0] in ("profile_start", "profile_stop", "window_start"):
            urgent.append(msg)
            inbox.put(("urgent",))  # wakes an idle engine
        else:
            inbox.put(msg)


class Engine:
    def __init__(self, spec: dict, base_dir: str, out, loaded: tuple | None = None) -> None:
        """``loaded``: (model, device, info) already loaded (bench/overhead_split.py drives this
        engine's own generate path on a model it compiled once)."""
        import torch

        from loadtest.backends.transformers.loading import load_model

        self.spec, self.out, self.torch = spec, out, torch
        t = time.monotonic()
        self.model, self.device, self.info = loaded or load_model(spec, base_dir)
        self.info["load_s"] = round(time.monotonic() - t, 3)
        self.stamp_source = choose_stamp_source(self.device)
        self.info["stamp_source"] = self.stamp_source
        self.stamp_mismatches = (
            0  # batches since the last facts whose stamp count differed from their tokens
        )
        self.batches = 0
        self._batches_reported = 0
        self.acct = new_accounting()
        self.gc = process_gc_pauses()
        self.profiler = None  # a WorkerProfiler while a capture window is open
        self.pending_export = (
            None  # (profiler, out_dir): a closed window, exported at the end of the run
        )
        self.urgent: deque = (
            deque()
        )  # checked every decode step: a deque's emptiness test takes no lock
        # Fault injection for tests: an OOM in batch N, or the worker dying at batch N.
        self.fault_oom_batch = int(os.environ.get("LOADTEST_FAULT_OOM_BATCH", "0"))
        self.fault_exit_batch = int(os.environ.get("LOADTEST_FAULT_EXIT_BATCH", "0"))

    # -- the loop -----------------------------------------------------------------------------

    def serve(self, inbox: queue.Queue, cancelled: set) -> None:
        while True:
            max_bs = 1 if self.spec["mode"] == "single" else self.spec["max_batch_size"]
            max_wait = 0.0 if self.spec["mode"] == "single" else self.spec["max_wait_ms"] / 1000
            msg = inbox.get()
            if msg[0] == "stop":
                break
            if self.handle_control(msg):
                continue
            batch = [msg]
            deadline = time.monotonic() + max_wait
            while len(batch) < max_bs:
                try:
                    nxt = inbox.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if nxt[0] != "req":
                    if nxt[0] != "stop" and self.handle_control(nxt):
                        continue  # control first: behind a stream of requests it would wait forever
                    inbox.put(nxt)  # stop: after this batch
                    break
                batch.append(nxt)
            batch = [r for r in batch if r[1] not in cancelled]
            if batch:
                self._run_batch(batch, cancelled)
        self.out.send(("stopped", self._facts()))

    def handle_control(self, msg) -> bool:
        """warmup / configure / facts / bare: True when ``msg`` was one of them."""
        if msg[0] == "warmup":
            self._warmup(msg[1])
        elif msg[0] == "configure":
            self.spec = {**self.spec, **msg[1]}
        elif msg[0] == "facts":
            self.out.send(("facts", self._facts(reset=True)))
        elif msg[0] == "bare":
            self.out.send(("bare_done", self.bare_generate(*msg[1:])))
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
        the trace waits for the end of the run (``_facts``): it takes seconds."""
        while self.urgent:
            msg = self.urgent.popleft()
            if msg[0] == "profile_start" and self.profiler is None:
                from loadtest.backends.transformers.profiling import WorkerProfiler

                self.profiler = WorkerProfiler(self.torch, self.device, msg[1])
                self.profiler.start()
                self.out.send(("profiling", time.monotonic_ns()))
            elif msg[0] == "window_start":  # the measurement window opened: count from here
                self.acct = new_accounting()  # steps handed over from now on count in this one
                self.gc.summary(reset=True)
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
        self.out.send(("admitted", time.monotonic_ns(), rids))
        self.batches += 1
        try:
            if self.fault_exit_batch and self.batches == self.fault_exit_batch:
                self.out.flush()  # dies at batch N: the batches before it were reported
                os._exit(3)
            if self.fault_oom_batch and self.batches == self.fault_oom_batch:
                raise torch.OutOfMemoryError("injected by LOADTEST_FAULT_OOM_BATCH")
            self.stamp_mismatches += self._generate(batch, cancelled, self.out, finished)
        except torch.OutOfMemoryError as exc:
            self._fail_rest(rids, finished, "CudaOOM", str(exc)[:200])
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        except Exception as exc:
            self._fail_rest(rids, finished, type(exc).__name__, str(exc)[:200])

    def _fail_rest(self, rids, finished: set, error_type: str, message: str) -> None:
        """Fail the rows not yet reported done, after the outbox has processed the batch's steps."""
        t = time.monotonic_ns()

        def failed():
            pending = [rid for rid in rids if rid not in finished]
            return [("failed", t, pending, error_type, message)] if pending else []

        self.out.call(failed)

    def _generate(self, batch: list, cancelled: set, out, finished: set) -> int:
        """One padded generate() for the batch; returns 1 if the number of step stamps differed
        from the number of tokens generate() returned, else 0."""
        torch = self.torch
        width = max(len(r[2]) for r in batch)
        pad = self.info.get("pad_token_id", 0)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, r in enumerate(
            batch
        ):  # left padding: every row's next token lands in the last column
            ids[i, width - len(r[2]) :] = torch.tensor(r[2], dtype=torch.long)
            mask[i, width - len(r[2]) :] = 1
        real = not isinstance(out, _NullOut)
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
        kwargs = self._generate_kwargs(
            max(r[3] for r in batch), all(r[4] for r in batch), batch[0][5]
        )
        hook = None
        if self.stamp_source == AFTER_SYNC:
            hook = AfterSyncStamps(torch, streamer)
        else:
            kwargs["streamer"] = streamer
        label = None if self.profiler is None else f"loadtest batch {[r[1] for r in batch]}"
        ids, mask = ids.to(self.device), mask.to(self.device)
        with torch.inference_mode(), self.profiler.annotate(label) if label else _nothing():
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

    def _generate_kwargs(self, max_new: int, ignore_eos: bool, eos) -> dict:
        kwargs = dict(
            max_new_tokens=max_new,
            do_sample=False,
            pad_token_id=self.info.get("pad_token_id", 0),
            eos_token_id=None if ignore_eos else eos,
        )
        if ignore_eos:
            kwargs["min_new_tokens"] = max_new
        if self.spec.get("compile"):
            kwargs["cache_implementation"] = "static"
        return kwargs

    def bare_generate(self, batch_size: int, prompt_len: int, new_tokens: int, reps: int) -> list:
        """The reference the harness is judged against: ``reps`` generate() calls as a user's own
        loop makes them on a batch of this shape (inputs already on the device, the same settings
        as ``_generate``, fixed length), with no streamer, stamps or messages. Seconds per call,
        each from the call to the device being idle after it."""
        torch = self.torch
        ids = torch.full((batch_size, prompt_len), 65, dtype=torch.long).to(self.device)
        mask = torch.ones_like(ids)
        kwargs = self._generate_kwargs(new_tokens, True, None)
        cuda = self.device.type == "cuda"
        seconds = []
        with torch.inference_mode():
            for _ in range(reps):
                if cuda:
                    torch.cuda.synchronize(self.device)
                t = time.perf_counter()
                self.model.generate(input_ids=ids, attention_mask=mask, **kwargs)
                if cuda:
                    torch.cuda.synchronize(self.device)
                seconds.append(time.perf_counter() - t)
        return seconds

    def _warmup(self, shapes: list) -> None:
        t = time.monotonic()
        for batch_size, prompt_len, new_tokens in shapes:
            fake = [
                ("req", -1 - i, [65] * prompt_len, new_tokens, True, None)
                for i in range(batch_size)
            ]
            if self._generate(fake, set(), _NullOut(), set()):
                # Not one stamp per token: this transformers' loop does not call its stop check
                # the way AfterSyncStamps expects. Stamp from the streamer instead.
                self.stamp_source = STREAMER
                self.info["stamp_source"] = (
                    f"{STREAMER} (the after-sync hook miscounted in warm-up)"
                )
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()
        self.settle()
        self.out.send(("warmed", round(time.monotonic() - t, 3)))

    def settle(self) -> None:
        """After warm-up: the heap frozen, and the collections so far (that one included) not
        counted as the run's."""
        settle_heap()
        self.gc.summary(reset=True)

    def _facts(self, reset: bool = False) -> dict:
        torch = self.torch
        self.out.flush()  # the accounting is updated on the outbox's thread
        facts = {
            "batches": self.batches - self._batches_reported,
            "roofline_acct": dict(self.acct),
            "stamp_mismatches": self.stamp_mismatches,
            "gc_pauses": self.gc.summary(reset),
        }
        if reset and self.pending_export is not None:
            profiler, out_dir = self.pending_export
            self.pending_export = None
            facts["profile_export"] = profiler.export(out_dir)
        if reset:
            self._batches_reported = self.batches
            self.acct = new_accounting()
            self.stamp_mismatches = 0
        if self.device.type == "cuda":
            facts["peak_mem_mb"] = round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)
            if reset:
                torch.cuda.reset_peak_memory_stats(self.device)
        else:
            import resource

            facts["peak_rss_mb"] = round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
            )
        return facts


def new_accounting() -> dict:
    """What the roofline needs from the steps this worker ran (see loadtest.telemetry.roofline)."""
    return {
        "prefill_batches": 0,
        "prefill_tokens": 0,
        "prefill_attn_pairs": 0,
        "prefill_s": 0.0,
        "decode_steps": 0,
        "decode_rows": 0,
        "decode_ctx_sum": 0,
        "decode_s": 0.0,
    }


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _NullOut:
    def send(self, msg) -> None:
        pass

    def defer(self, fn, *args) -> None:
        pass

    call = defer

    def flush(self) -> None:
        pass


AFTER_SYNC = "after generate()'s own per-step sync"
STREAMER = "streamer"


def choose_stamp_source(device) -> str:
    """AFTER_SYNC where generate()'s loop ends each step with a ``StopCheck`` that waits for the
    device (transformers 5 on CUDA and the CPU); else the streamer API. Before transformers 5 the
    loop's wait sits inside ``_has_unfinished_sequences``, with no hook right after it."""
    try:
        from transformers.generation import utils as gu
    except ImportError:
        return STREAMER
    if not isinstance(getattr(gu, "StopCheck", None), type):
        return STREAMER
    deferred = getattr(gu, "DeferredStopCheck", None)
    try:  # a deferred stop check does not wait for the step: a stamp there would be too early
        if deferred is not None and deferred.is_supported(device, None, False, is_assistant=False):
            return STREAMER
    except Exception:
        return STREAMER
    return AFTER_SYNC


class AfterSyncStamps:
    """Stamps each step right after generate()'s own per-step synchronisation, with no extra one.

    A streamer costs the decode loop a second device synchronisation a step (``streamer.put``
    receives ``tokens.cpu()``): ~2% of a compiled 3 ms step on the H100 host. transformers 5's
    loop already waits for every step: it ends with ``stop_check(unfinished, next_tokens,
    length)``, a ``StopCheck`` whose ``bool(unfinished.max() == 0)`` synchronises. For one
    generate() call (``install`` .. ``remove``) the module's ``StopCheck`` is a subclass that first
    queues an asynchronous copy of the step's tokens (contiguous: one copy, into a pinned buffer
    made once per batch) and then runs the check, whose wait also covers the copy, then stamps:
    at the stamp the step is done and its tokens are on the host. One call per token generated;
    each batch checks that (``stamps``), and warm-up falls back to the streamer if not."""

    def __init__(self, torch, streamer: StepStreamer) -> None:
        self.torch, self.streamer = torch, streamer
        self.stamps = 0
        self._buf = None
        self._gu = self._original = None

    def install(self) -> None:
        from transformers.generation import utils as gu

        self._gu, self._original = gu, gu.StopCheck
        gu.StopCheck = _stamping_stop_check(gu.StopCheck, self)

    def remove(self) -> None:
        if self._gu is not None:
            self._gu.StopCheck = self._original

    def copy_tokens(self, tokens):
        """Queue the copy of this step's tokens to the host; the row of the buffer they land in."""
        if self._buf is None:
            self._cuda = tokens.device.type == "cuda"
            self._buf = self.torch.empty(
                (self.streamer.max_steps, tokens.shape[0]),
                dtype=tokens.dtype,
                pin_memory=self._cuda,
            )
        row = self._buf[min(self.stamps, self._buf.shape[0] - 1)]
        row.copy_(tokens, non_blocking=self._cuda)
        return row

    def stamp(self, row) -> None:
        t = time.monotonic_ns()  # the check has waited for the step and the copy
        self.stamps += 1
        self.streamer.step(t, row)


def _stamping_stop_check(base: type, hook: AfterSyncStamps) -> type:
    class StampingStopCheck(base):
        def __call__(self, unfinished_sequences, tokens, length):
            row = hook.copy_tokens(tokens)
            stop = super().__call__(unfinished_sequences, tokens, length)
            hook.stamp(row)
            return stop

    return StampingStopCheck


class StepStreamer:
    """``generate()`` calls ``put`` once with the prompt, then once per step with the new tokens,
    on the host. ``put`` runs between two decode steps, so it only stamps and queues the step;
    turning steps into per-request messages (``_drain``) runs on the outbox's thread, in order."""

    def __init__(
        self,
        batch: list,
        out,
        cancelled: set,
        finished: set,
        width: int = 0,
        on_step=None,
        accounting=None,
    ) -> None:
        """``accounting()``: the roofline accounting dict a step handed over now counts in, or
        None for a step that does not count; None: no accounting."""
        self.width, self.on_step, self.accounting = width, on_step, accounting or (lambda: None)
        self.lens = [len(r[2]) for r in batch]
        self._t_prev = None
        self.rids = [r[1] for r in batch]
        self.caps = [r[3] for r in batch]
        self.eos = [None if r[4] else r[5] for r in batch]
        self.counts = [0] * len(batch)
        self.active = [True] * len(batch)
        self.finished = finished
        self.out, self.cancelled = out, cancelled
        self._prompt_seen = False
        self.decoded = 0  # steps so far
        # Plain steps (see _drain): the rows going, the step at which the first of them ends,
        # and the number of cancellations already looked at.
        self._going = list(self.rids)
        self._next_end = min(self.caps, default=0)
        self._n_cancelled = -1  # look at the cancellations on the first step
        self._check_eos = any(e is not None for e in self.eos)  # else token values are never read
        self._eos_ids = {e for e in self.eos if e is not None}
        self.max_steps = max(self.caps, default=1)  # generate()'s max_new_tokens
        # Handed from the decode thread to the writer: (stamp, tokens or None, accounting or
        # None) per step, and whether a drain is queued (one per writer period, not per step).
        self._steps: deque = deque()
        self._drain_queued = False
        # On the decode thread: steps handed over so far, and the steps at which a row reaches
        # its cap (ascending, as a stack): the writer is woken at once for a step where a row
        # may end, so its ``done`` (which a closed-loop user waits on) is not held for a period.
        self._handed = 0
        self._cap_ends = sorted(set(self.caps), reverse=True)

    def start(self, t: int) -> None:
        self._prompt_seen = True
        self._t_prev = t  # generate() starts the prefill now

    def put(self, value) -> None:
        """The streamer API (the fallback stamp source, see AfterSyncStamps)."""
        if value.device.type != "cpu":  # generate() hands over host tensors; if not, copy first
            value = value.cpu()
        t = time.monotonic_ns()  # the step's tokens are on the host now
        if not self._prompt_seen:
            self.start(t)
            return
        self.step(t, value)

    def step(self, t: int, value) -> None:
        """One decode step ended at ``t``, its tokens (``value``) on the host."""
        self._handed = n = self._handed + 1
        ends = False
        while self._cap_ends and self._cap_ends[-1] <= n:
            self._cap_ends.pop()
            ends = True
        tokens = None  # token values are only read when a row may stop at EOS
        if self._check_eos:  # read here, so the buffer row may be reused
            tokens = value.tolist()
            if not isinstance(tokens, list):
                tokens = [tokens]
            ends = ends or not self._eos_ids.isdisjoint(tokens)
        self._steps.append((t, tokens, self.accounting()))
        if ends:
            self._drain_queued = True
            self.out.call(self._drain)
        elif not self._drain_queued:
            self._drain_queued = True
            self.out.defer(self._drain)
        if self.on_step is not None:
            self.on_step()

    def _drain(self) -> list:
        """On the outbox's thread: the messages for the steps handed over since the last drain.
        Every row still going gets one token a step, so a row's count is the number of steps so
        far. A run of plain steps (no row can end, nothing newly cancelled, token values not
        needed) is one ``tokens`` message with the run's stamps; any other step is looked at
        row by row (``_rows``)."""
        self._drain_queued = False  # a step handed over from now on queues the next drain
        steps, msgs, run = self._steps, [], []
        cancelled = self.cancelled
        # Decode steps are added to their accounting once per drain (or when it changes).
        into, d_steps, d_ctx, d_ns = None, 0, 0, 0
        while steps:
            t, tokens, acct = steps.popleft()
            dt, self._t_prev = t - self._t_prev, t
            if acct is None:
                pass
            elif self.decoded == 0:  # the first step ends the prefill
                acct["prefill_batches"] += 1
                acct["prefill_tokens"] += sum(self.lens)
                acct["prefill_attn_pairs"] += sum(k * (k + 1) // 2 for k in self.lens)
                acct["prefill_s"] += dt / 1e9
            else:  # a decode step: every row of the batch is computed until the last one ends
                if acct is not into:
                    self._add_decode(into, d_steps, d_ctx, d_ns)
                    into, d_steps, d_ctx, d_ns = acct, 0, 0, 0
                d_steps += 1
                d_ctx += self.width + self.decoded
                d_ns += dt
            self.decoded = n = self.decoded + 1
            if tokens is None and n < self._next_end and len(cancelled) == self._n_cancelled:
                run.append(t)
                continue
            if run:
                msgs.append(("tokens", tuple(run), self._going))
                run = []
            msgs.extend(self._rows(t, n, tokens))
        if run:
            msgs.append(("tokens", tuple(run), self._going))
        self._add_decode(into, d_steps, d_ctx, d_ns)
        return msgs

    def _add_decode(self, acct: dict | None, steps: int, ctx: int, ns: int) -> None:
        if acct is not None and steps:
            rows = len(self.rids)
            acct["decode_steps"] += steps
            acct["decode_rows"] += rows * steps
            acct["decode_ctx_sum"] += rows * ctx
            acct["decode_s"] += ns / 1e9

    def _rows(self, t: int, n: int, tokens) -> list:
        """Step ``n``, row by row: tokens for the rows going, ``done`` for those ending now."""
        cancelled = self.cancelled
        active, rids, counts, caps, eos = self.active, self.rids, self.counts, self.caps, self.eos
        stamped, msgs = [], []
        for i in range(len(rids)):
            if not active[i]:
                continue
            rid = rids[i]
            if cancelled and rid in cancelled:
                active[i] = False
                continue
            counts[i] = n
            stamped.append(rid)
            if n >= caps[i] or (eos[i] is not None and tokens[i] == eos[i]):
                active[i] = False
                self.finished.add(rid)
                msgs.append(("done", t, rid, n))
        if stamped:
            msgs.insert(0, ("tokens", (t,), stamped))
        self._n_cancelled = len(cancelled)
        self._going = [
            rid for i, rid in enumerate(rids) if active[i]
        ]  # a new list: sent ones stay as sent
        self._next_end = min((caps[i] for i in range(len(rids)) if active[i]), default=0)
        return msgs

    def end(self) -> None:
        pass

    def close_rest(self) -> None:
        """After generate returned: rows still going (it stopped early) end as they are."""
        t = time.monotonic_ns()

        def rest():
            msgs = []
            for i, rid in enumerate(self.rids):
                if rid not in self.finished and rid not in self.cancelled:
                    self.finished.add(rid)
                    msgs.append(
                        ("done", t, rid, self.decoded if self.active[i] else self.counts[i])
                    )
            return msgs

        self.out.call(rest)
