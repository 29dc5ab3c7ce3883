"""The engine worker process: loads the model, batches requests, stamps tokens on the host.

Runs in its own process (spawned): a Python ``generate()`` loop holds the GIL and would delay
the harness's dispatch, and a process isolates a CUDA OOM or crash. Protocol (tuples over two
one-way pipes):

    in : ("req", rid, prompt_ids, max_new, ignore_eos, eos_id) | ("cancel", rid) | ("warmup", shapes) | ("stop",)
    out: ("ready", info) | ("admitted", t_ns, [rid]) | ("tokens", t_ns, [rid])   # one per decode step
         | ("stamps", [(rid, (t_ns, ...)), ...])   # continuous mode: per-token stamps, one message per poll
         | ("done", t_ns, rid, n) | ("failed", t_ns, [rid], type, message) | ("warmed", seconds) | ("stopped", facts)
         | ("many", [msg, ...])   # what queued up while the previous write ran (see outbox.py)

Every stamp is ``time.monotonic_ns()`` taken right after the step's new tokens were copied to
the host (``.tolist()`` synchronises with the device), in this process.
"""
from __future__ import annotations

import os
import queue
import threading
import time
import traceback
from collections import deque

from .outbox import Outbox

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
    threading.Thread(target=_pump, args=(inbox_conn, inbox, cancelled, engine.urgent), daemon=True).start()
    if spec["mode"] == "continuous":
        from .engine_continuous import ContinuousEngine

        try:
            served = ContinuousEngine(engine)
        except Exception as exc:
            out.send(("load_failed", f"continuous batching manager: {type(exc).__name__}: {exc}", traceback.format_exc(limit=5)))
            return
        engine.info["continuous"] = {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
                                     for k, v in served.settings.items()}
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

        from .model_loading import load_model

        self.spec, self.out, self.torch = spec, out, torch
        t = time.monotonic()
        self.model, self.device, self.info = loaded or load_model(spec, base_dir)
        self.info["load_s"] = round(time.monotonic() - t, 3)
        self.batches = 0
        self._batches_reported = 0
        self.acct = new_accounting()
        self.profiler = None  # a WorkerProfiler while a capture window is open
        self.pending_export = None  # (profiler, out_dir): a closed window, exported at the end of the run
        self.urgent: deque = deque()  # checked every decode step: a deque's emptiness test takes no lock
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
        """warmup / configure / facts: True when ``msg`` was one of them."""
        if msg[0] == "warmup":
            self._warmup(msg[1])
        elif msg[0] == "configure":
            self.spec = {**self.spec, **msg[1]}
        elif msg[0] == "facts":
            self.out.send(("facts", self._facts(reset=True)))
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
                from .profiling import WorkerProfiler

                self.profiler = WorkerProfiler(self.torch, self.device, msg[1])
                self.profiler.start()
                self.out.send(("profiling", time.monotonic_ns()))
            elif msg[0] == "window_start":  # the measurement window opened: count from here
                acct = self.acct  # on the outbox's thread, after the steps queued before it
                self.out.call(lambda: acct.update(new_accounting()))
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
            self._generate(batch, cancelled, self.out, finished)
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

    def _generate(self, batch: list, cancelled: set, out, finished: set) -> None:
        torch = self.torch
        width = max(len(r[2]) for r in batch)
        pad = self.info.get("pad_token_id", 0)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, r in enumerate(batch):  # left padding: every row's next token lands in the last column
            ids[i, width - len(r[2]):] = torch.tensor(r[2], dtype=torch.long)
            mask[i, width - len(r[2]):] = 1
        max_new = max(r[3] for r in batch)
        ignore_eos = all(r[4] for r in batch)
        eos = batch[0][5]
        real = not isinstance(out, _NullOut)
        streamer = StepStreamer(batch, out, cancelled, finished, self.acct if real else None, width,
                                self._after_step if real else None, counting=lambda: self.profiler is None)
        kwargs = dict(max_new_tokens=max_new, do_sample=False, streamer=streamer, pad_token_id=pad,
                      eos_token_id=None if ignore_eos else eos)
        if ignore_eos:
            kwargs["min_new_tokens"] = max_new
        if self.spec.get("compile"):
            kwargs["cache_implementation"] = "static"
        label = None if self.profiler is None else f"loadtest batch {[r[1] for r in batch]}"
        with torch.inference_mode(), (self.profiler.annotate(label) if label else _nothing()):
            self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **kwargs)
        if self.profiler is not None:
            self.profiler.end_steps()
        streamer.close_rest()

    def _warmup(self, shapes: list) -> None:
        t = time.monotonic()
        for batch_size, prompt_len, new_tokens in shapes:
            fake = [("req", -1 - i, [65] * prompt_len, new_tokens, True, None) for i in range(batch_size)]
            self._generate(fake, set(), _NullOut(), set())
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()
        self.out.send(("warmed", round(time.monotonic() - t, 3)))

    def _facts(self, reset: bool = False) -> dict:
        torch = self.torch
        self.out.flush()  # the accounting is updated on the outbox's thread
        facts = {"batches": self.batches - self._batches_reported, "roofline_acct": dict(self.acct)}
        if reset and self.pending_export is not None:
            profiler, out_dir = self.pending_export
            self.pending_export = None
            facts["profile_export"] = profiler.export(out_dir)
        if reset:
            self._batches_reported = self.batches
            self.acct = new_accounting()
        if self.device.type == "cuda":
            facts["peak_mem_mb"] = round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)
            if reset:
                torch.cuda.reset_peak_memory_stats(self.device)
        else:
            import resource

            facts["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        return facts


def new_accounting() -> dict:
    """What the roofline needs from the steps this worker ran (see loadtest.roofline)."""
    return {"prefill_batches": 0, "prefill_tokens": 0, "prefill_attn_pairs": 0, "prefill_s": 0.0,
            "decode_steps": 0, "decode_rows": 0, "decode_ctx_sum": 0, "decode_s": 0.0}


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


class StepStreamer:
    """``generate()`` calls ``put`` once with the prompt, then once per step with the new tokens,
    on the host. ``put`` runs between two decode steps, so it only stamps and queues: turning the
    step into per-request messages (``_step``) runs on the outbox's thread, in order."""

    def __init__(self, batch: list, out, cancelled: set, finished: set, acct: dict | None = None, width: int = 0,
                 on_step=None, counting=lambda: True) -> None:
        self.acct, self.width, self.steps, self.on_step, self.counting = acct, width, 0, on_step, counting
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

    def put(self, value) -> None:
        if value.device.type != "cpu":  # generate() hands over host tensors; if not, copy first
            value = value.cpu()
        t = time.monotonic_ns()  # the step's tokens are on the host now
        if not self._prompt_seen:
            self._prompt_seen = True
            self._t_prev = t  # generate() starts the prefill now
            return
        self.out.defer(self._step, t, value, self.counting())
        if self.on_step is not None:
            self.on_step()

    def _step(self, t: int, value, counting: bool) -> list:
        """On the outbox's thread: the step's messages (tokens for every row still going, done
        for the rows that just ended)."""
        tokens = value.tolist()
        if self.acct is not None:
            self._account(t, counting)
        if not isinstance(tokens, list):
            tokens = [tokens]
        active, rids, counts, caps, eos, cancelled = self.active, self.rids, self.counts, self.caps, self.eos, self.cancelled
        stamped, msgs = [], []
        for i, tok in enumerate(tokens):
            if not active[i]:
                continue
            rid = rids[i]
            if cancelled and rid in cancelled:
                active[i] = False
                continue
            counts[i] += 1
            stamped.append(rid)
            if counts[i] >= caps[i] or tok == eos[i]:  # eos[i] is None when the request ignores EOS
                active[i] = False
                self.finished.add(rid)
                msgs.append(("done", t, rid, counts[i]))
        if stamped:
            msgs.insert(0, ("tokens", t, stamped))
        return msgs

    def _account(self, t: int, counting: bool) -> None:
        """Step timings for the roofline: the first step ends the prefill, each later one is a
        decode step (every row of the batch is computed until the last one finishes). Counted
        from the start of the measurement window (warm-up requests may compile), and not while
        a profiler is on (its overhead is not the model's speed)."""
        a, dt = self.acct, (t - self._t_prev) / 1e9
        self._t_prev = t
        if not counting:
            self.steps += 1
            return
        if self.steps == 0:
            a["prefill_batches"] += 1
            a["prefill_tokens"] += sum(self.lens)
            a["prefill_attn_pairs"] += sum(n * (n + 1) // 2 for n in self.lens)
            a["prefill_s"] += dt
        else:
            rows = len(self.rids)
            a["decode_steps"] += 1
            a["decode_rows"] += rows
            a["decode_ctx_sum"] += rows * (self.width + self.steps)
            a["decode_s"] += dt
        self.steps += 1

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
                    msgs.append(("done", t, rid, self.counts[i]))
            return msgs

        self.out.call(rest)
