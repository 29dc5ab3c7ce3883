"""Continuous (in-flight) batching in the engine worker, through transformers' own
``ContinuousBatchingManager``: requests join and leave the running batch every step.

The manager generates on its own thread and, with ``record_timestamps``, stamps each token with
``time.perf_counter()`` when it reaches the host. On Linux that is CLOCK_MONOTONIC, the clock of
``time.monotonic_ns()``; this is checked at start, and if the clocks differ the tokens are
stamped when this loop receives them instead (a little later, never earlier).

EOS is handled here, not by the manager: the manager runs with EOS disabled, and a natural-length
request is finished and cancelled when its EOS token arrives. That works the same across
transformers versions whose per-request EOS options differ.
"""

from __future__ import annotations

import dataclasses
import queue
import time
from typing import TYPE_CHECKING, Any

from loadtest.backends.transformers import messages
from loadtest.backends.transformers.engine_facts import engine_facts

if TYPE_CHECKING:
    from transformers.generation.continuous_batching import ContinuousBatchingManager
    from transformers.generation.continuous_batching.requests import GenerationOutput

    from loadtest.backends.transformers.engine import Engine

POLL_S = 0.002


def _same_clock() -> bool:
    return abs(time.perf_counter() - time.monotonic()) < 1e-3


class ContinuousEngine:
    """transformers' continuous-batching manager driven by the worker, with per-token stamps."""

    def __init__(self, base: Engine) -> None:
        """``base``: the loaded Engine (model, device, out pipe, spec)."""
        self.base = base
        self.out = base.out
        self.stamp_source = "manager" if _same_clock() else "receipt"
        self.manager = self._start_manager()
        self.live: dict[str, dict] = {}  # request id -> {rid, cap, eos, seen, admitted}

    def _start_manager(self) -> ContinuousBatchingManager:
        from transformers import GenerationConfig

        spec, model = self.base.spec, self.base.model
        gen = GenerationConfig(
            do_sample=False,
            eos_token_id=-1,
            pad_token_id=self.base.info.get("pad_token_id", 0),
            max_new_tokens=4096,
        )
        cb = spec.continuous
        # each version takes its own set: the ones it names are given (unchecked here)
        wanted: dict[str, Any] = {
            "page_size": cb.block_size,
            "block_size": cb.block_size,
            "num_blocks": cb.num_blocks,
            "max_batch_tokens": cb.max_batch_tokens,
            # unset: the manager's own choice (with chat traffic, CUDA graphs measured slower
            # here: docs/benchmarks.md)
            "use_cuda_graph": cb.use_cuda_graph,
            "max_requests_per_batch": spec.max_batch_size,
        }
        try:
            from transformers.generation.configuration_utils import ContinuousBatchingConfig

            names = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
            config = ContinuousBatchingConfig(
                **{k: v for k, v in wanted.items() if k in names and v is not None}
            )
            manager = model.init_continuous_batching(
                generation_config=gen, continuous_batching_config=config
            )
            self.settings = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else {}
        except ImportError:  # older transformers: the settings live on the generation config
            for k, v in wanted.items():
                if v is not None:
                    setattr(gen, k, v)
            manager = model.init_continuous_batching(generation_config=gen)
            self.settings = {k: v for k, v in wanted.items() if v is not None}
        manager.start()
        return manager

    def serve(self, inbox: queue.Queue, cancelled: set) -> None:
        """Feed requests to the manager and relay its tokens until stopped."""
        while True:
            try:
                msg = inbox.get(timeout=0 if self.live else 0.05)
            except queue.Empty:
                msg = None
            if msg is not None:
                if msg[0] == "stop":
                    break
                if msg[0] == "warmup":
                    self._warmup(msg[1])
                    continue
                if self.base.handle_control(msg):
                    continue
                self._add(msg)
                continue  # take every waiting request before the next poll
            for rid in [k for k, v in self.live.items() if v["rid"] in cancelled]:
                self.manager.cancel_request(rid)
                self.live.pop(rid)
            self._poll()
        self.manager.stop(block=True, timeout=30)
        self.out.send(("stopped", {**engine_facts(self.base), "stamp_source": self.stamp_source}))

    def _add(self, msg: messages.Req) -> None:
        _, rid, prompt, cap, ignore_eos, eos = msg
        key = str(rid)
        self.live[key] = {
            "rid": rid,
            "cap": cap,
            "eos": None if ignore_eos else eos,
            "seen": 0,
            "admitted": False,
        }
        self.manager.add_request(
            list(prompt),
            request_id=key,
            max_new_tokens=cap,
            streaming=True,
            record_timestamps=self.stamp_source == "manager",
        )

    def _poll(self) -> None:
        """Take every result the manager has ready; one message per poll for all their tokens."""
        stamps: list = []
        dones: list = []
        fails: list = []
        r = self.manager.get_result(timeout=POLL_S)
        while r is not None:
            self._take(r, stamps, dones, fails)
            r = self.manager.get_result(timeout=0)
        if stamps:
            self.out.send(("stamps", stamps))
        for msg in fails + dones:
            self.out.send(msg)

    def _take(
        self,
        r: GenerationOutput,
        stamps: list[tuple[int, tuple[int, ...]]],
        dones: list[messages.Done],
        fails: list[messages.Failed],
    ) -> None:
        st = self.live.get(r.request_id)
        if st is None:
            return
        now = time.monotonic_ns()
        if not st["admitted"]:
            st["admitted"] = True
            started = r.lifespan[0] if r.lifespan and r.lifespan[0] > 0 else None
            t_adm = round(started * 1e9) if started and self.stamp_source == "manager" else now
            self.out.send(messages.admitted(min(t_adm, now), [st["rid"]]))
        if r.error:
            fails.append(messages.failed(now, [st["rid"]], "EngineError", str(r.error)[:200]))
            self.live.pop(r.request_id)
            return
        tokens = r.generated_tokens
        new = tokens[st["seen"] : st["cap"]]
        ts = r.timestamps if self.stamp_source == "manager" and r.timestamps else None
        done = False
        kept = []
        for i, tok in enumerate(new, start=st["seen"]):
            kept.append(round(ts[i] * 1e9) if ts and i < len(ts) else now)
            if st["eos"] is not None and tok == st["eos"]:
                done = True
                break
        st["seen"] += len(kept)
        if kept:
            stamps.append((st["rid"], tuple(kept)))
        if done or st["seen"] >= st["cap"] or r.is_finished():
            if not r.is_finished():
                self.manager.cancel_request(r.request_id)
            dones.append(messages.done(kept[-1] if kept else now, st["rid"], st["seen"]))
            self.live.pop(r.request_id)

    def _warmup(self, shapes: list) -> None:
        with self.base.warmup.timed():
            self._warm_requests(shapes)

    def _warm_requests(self, shapes: list) -> None:
        n = max(bs for bs, _, _ in shapes)
        length = max(pl for _, pl, _ in shapes)
        keys = [f"warmup-{i}" for i in range(n)]
        for k in keys:
            self.manager.add_request([65] * length, request_id=k, max_new_tokens=4, streaming=False)
        pending = set(keys)
        deadline = time.monotonic() + 600
        while pending and time.monotonic() < deadline:
            r = self.manager.get_result(timeout=0.1)
            if r is not None and r.is_finished():
                pending.discard(r.request_id)
