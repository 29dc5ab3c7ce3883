"""Token stamps and step accounting in the engine worker.

Every token stamp is ``time.monotonic_ns()`` taken in the worker when the decode step that
produced the token is done and the host knows it: right after generate()'s own per-step device
synchronisation (``AfterSyncStamps``), or with the streamer fallback right after the tokens were
copied to the host (``StepStreamer``). The streamer also keeps the roofline's accounting of
prefill and decode steps (``StepAccounting``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Literal, Protocol

from loadtest.backends.transformers import messages
from loadtest.core.step_accounting import StepAccounting

if TYPE_CHECKING:
    from torch import Tensor
    from torch import device as TorchDevice

    from loadtest.backends.transformers.outbox import Deferred


class nothing:
    """A context manager that does nothing (where no stamping hook is installed)."""

    def __enter__(self) -> nothing:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


class Out(Protocol):
    """Where the engine's messages go: the worker's ``outbox.Outbox``, or ``NullOut``."""

    def send(self, msg: messages.Outbound) -> None: ...
    def defer(self, fn: Deferred, *args: object) -> None: ...
    def call(self, fn: Deferred, *args: object) -> None: ...
    def flush(self) -> None: ...


class NullOut:
    """An outbox that drops everything (warm-up batches report nothing)."""

    def send(self, msg: messages.Outbound) -> None:
        pass

    def defer(self, fn: Deferred, *args: object) -> None:
        pass

    def call(self, fn: Deferred, *args: object) -> None:
        pass

    def flush(self) -> None:
        pass


AFTER_SYNC = "after generate()'s own per-step sync"
STREAMER = "streamer"


def choose_stamp_source(device: TorchDevice) -> str:
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
    receives ``tokens.cpu()``), a visible share of a compiled step. transformers 5's
    loop already waits for every step: it ends with ``stop_check(unfinished, next_tokens,
    length)``, a ``StopCheck`` whose ``bool(unfinished.max() == 0)`` synchronises. For one
    generate() call (``install`` .. ``remove``) the module's ``StopCheck`` is a subclass that first
    queues an asynchronous copy of the step's tokens (contiguous: one copy, into a pinned buffer
    made once per batch) and then runs the check, whose wait also covers the copy, then stamps:
    at the stamp the step is done and its tokens are on the host. One call per token generated;
    each batch checks that (``stamps``), and warm-up falls back to the streamer if not."""

    def __init__(self, torch: ModuleType, streamer: StepStreamer) -> None:
        self.torch, self.streamer = torch, streamer
        self.stamps = 0
        self._buf: Tensor | None = None  # the pinned host buffer, made at the first copy
        self._gu: ModuleType | None = None  # transformers' generation utilities, patched
        self._original: object = None  # their own stop check

    def install(self) -> None:
        """Put the stamping stop check in place for one generate() call."""
        from transformers.generation import utils as gu

        self._gu, self._original = gu, gu.StopCheck
        gu.StopCheck = _stamping_stop_check(gu.StopCheck, self)  # type: ignore[misc,assignment]

    def remove(self) -> None:
        """Restore transformers' own stop check."""
        if self._gu is not None:
            setattr(self._gu, "StopCheck", self._original)  # noqa: B010 (a module's, untyped)

    def copy_tokens(self, tokens: Tensor) -> Tensor:
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

    def stamp(self, row: Tensor) -> None:
        """Stamp the step whose tokens were just copied: now, after the device sync."""
        t = time.monotonic_ns()  # the check has waited for the step and the copy
        self.stamps += 1
        self.streamer.step(t, row)


def _stamping_stop_check(base: type, hook: AfterSyncStamps) -> type:
    class StampingStopCheck(base):
        def __call__(self, unfinished_sequences: Tensor, tokens: Tensor, length: int) -> Tensor:
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
        batch: list[messages.Req],
        out: Out,
        cancelled: set[int],
        finished: set[int],
        width: int = 0,
        on_step: Callable[[], None] | None = None,
        accounting: Callable[[], StepAccounting | None] | None = None,
    ) -> None:
        """``accounting()``: the roofline accounting dict a step handed over now counts in, or
        None for a step that does not count; None: no accounting."""
        self.width, self.on_step, self.accounting = width, on_step, accounting or (lambda: None)
        self.lens = [len(r[2]) for r in batch]
        self._t_prev = 0  # start() sets it: the prefill starts
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
        # (stamp, tokens when a row may stop at EOS, the accounting the step counts in)
        self._steps: deque[tuple[int, list[int] | None, StepAccounting | None]] = deque()
        self._drain_queued = False
        # On the decode thread: steps handed over so far, and the steps at which a row reaches
        # its cap (ascending, as a stack): the writer is woken at once for a step where a row
        # may end, so its ``done`` (which a closed-loop user waits on) is not held for a period.
        self._handed = 0
        self._cap_ends = sorted(set(self.caps), reverse=True)

    def start(self, t: int) -> None:
        """A batch starts: the prefill is timed from ``t``."""
        self._prompt_seen = True
        self._t_prev = t  # generate() starts the prefill now

    def put(self, value: Tensor) -> None:
        """The streamer API (the fallback stamp source, see AfterSyncStamps)."""
        if value.device.type != "cpu":  # generate() hands over host tensors; if not, copy first
            value = value.cpu()
        t = time.monotonic_ns()  # the step's tokens are on the host now
        if not self._prompt_seen:
            self.start(t)
            return
        self.step(t, value)

    def step(self, t: int, value: Tensor) -> None:
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
        steps, run = self._steps, []
        msgs: list[messages.Outbound] = []
        cancelled = self.cancelled
        # Decode steps are added to their accounting once per drain (or when it changes).
        into, d_steps, d_ctx, d_ns = None, 0, 0, 0
        while steps:
            t, tokens, acct = steps.popleft()
            dt, self._t_prev = t - self._t_prev, t
            if acct is None:
                pass
            elif self.decoded == 0:  # the first step ends the prefill
                acct.prefill_batches += 1
                acct.prefill_tokens += sum(self.lens)
                acct.prefill_attn_pairs += sum(k * (k + 1) // 2 for k in self.lens)
                acct.prefill_s += dt / 1e9
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
                msgs.append(messages.tokens(tuple(run), self._going))
                run = []
            msgs.extend(self._rows(t, n, tokens))
        if run:
            msgs.append(messages.tokens(tuple(run), self._going))
        self._add_decode(into, d_steps, d_ctx, d_ns)
        return msgs

    def _add_decode(self, acct: StepAccounting | None, steps: int, ctx: int, ns: int) -> None:
        if acct is not None and steps:
            rows = len(self.rids)
            acct.decode_steps += steps
            acct.decode_rows += rows * steps
            acct.decode_ctx_sum += rows * ctx
            acct.decode_s += ns / 1e9

    def _rows(self, t: int, n: int, tokens: list[int] | None) -> list[messages.Outbound]:
        """Step ``n``, row by row: tokens for the rows going, ``done`` for those ending now."""
        cancelled = self.cancelled
        active, rids, counts, caps, eos = self.active, self.rids, self.counts, self.caps, self.eos
        stamped: list[int] = []
        msgs: list[messages.Outbound] = []
        for i in range(len(rids)):
            if not active[i]:
                continue
            rid = rids[i]
            if cancelled and rid in cancelled:
                active[i] = False
                continue
            counts[i] = n
            stamped.append(rid)
            if n >= caps[i] or (eos[i] is not None and tokens is not None and tokens[i] == eos[i]):
                active[i] = False
                self.finished.add(rid)
                msgs.append(messages.done(t, rid, n))
        if stamped:
            msgs.insert(0, messages.tokens((t,), stamped))
        self._n_cancelled = len(cancelled)
        self._going = [
            rid for i, rid in enumerate(rids) if active[i]
        ]  # a new list: sent ones stay as sent
        self._next_end = min((caps[i] for i in range(len(rids)) if active[i]), default=0)
        return msgs

    def end(self) -> None:
        """generate() returned: flush the last steps."""
        pass

    def close_rest(self) -> None:
        """After generate returned: rows still going (it stopped early) end as they are."""
        t = time.monotonic_ns()

        def rest() -> list[messages.Outbound]:
            msgs: list[messages.Outbound] = []
            for i, rid in enumerate(self.rids):
                if rid not in self.finished and rid not in self.cancelled:
                    self.finished.add(rid)
                    msgs.append(
                        messages.done(t, rid, self.decoded if self.active[i] else self.counts[i])
                    )
            return msgs

        self.out.call(rest)
