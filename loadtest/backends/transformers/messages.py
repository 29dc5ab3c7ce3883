"""The engine worker's protocol: every message between the harness and the worker, typed.

Messages travel as plain tuples whose first item names the kind: a tuple pickles in ~3 µs where
a NamedTuple takes ~20 µs (measured on this project's CPU machine), and the worker's writer
thread pickles a message every 20 ms period on the decode loop's GIL. So the types below are
aliases that mypy checks at every construction site (the constructors) and every reader
unpacks by position, with the kind as a Literal.
"""

from __future__ import annotations

from typing import Literal

from loadtest.backends.base import Facts
from loadtest.config.observing import Profile

# --- harness -> worker -------------------------------------------------------------------------

Req = tuple[Literal["req"], int, list[int], int, bool, "int | None"]
Cancel = tuple[Literal["cancel"], int]
Warmup = tuple[Literal["warmup"], list[tuple[int, int, int]]]  # (batch size, prompt, new tokens)
Configure = tuple[Literal["configure"], int, float]  # the batcher's max size and wait (ms), live
FactsRequest = tuple[Literal["facts"]]
Call = tuple[Literal["call"], str, tuple]  # an engine hook: "module:function", its arguments
WindowStart = tuple[Literal["window_start"]]
ProfileStart = tuple[Literal["profile_start"], "Profile"]
ProfileStop = tuple[Literal["profile_stop"], str]  # where the trace is exported
Urgent = tuple[Literal["urgent"]]  # wakes an idle engine to read its urgent queue
Stop = tuple[Literal["stop"]]

# --- worker -> harness -------------------------------------------------------------------------

Ready = tuple[Literal["ready"], Facts]
LoadFailed = tuple[Literal["load_failed"], str, str]  # the error, a short traceback
Admitted = tuple[Literal["admitted"], int, list[int]]  # t_ns, rids now in a running batch
TokensRun = tuple[
    Literal["tokens"], tuple[int, ...], list[int]
]  # each rid got a token at each stamp
Stamps = tuple[Literal["stamps"], list[tuple[int, tuple[int, ...]]]]  # continuous: per-rid stamps
Done = tuple[Literal["done"], int, int, int]  # t_ns, rid, tokens generated
Failed = tuple[Literal["failed"], int, list[int], str, str]  # t_ns, rids, error type, message
Warmed = tuple[Literal["warmed"], float, dict[str, float]]  # seconds; compile_s, gc_s of them
Crashed = tuple[Literal["crashed"], str, str]  # the uncaught error, its traceback
FactsReply = tuple[Literal["facts"], Facts]
Stopped = tuple[Literal["stopped"], Facts]
Called = tuple[Literal["called"], object]  # what the hook returned
CallFailed = tuple[Literal["call_failed"], str]
Profiling = tuple[Literal["profiling"], int]
ProfileStopped = tuple[Literal["profile_stopped"], int]
Many = tuple[Literal["many"], list]  # several of the above in one pipe write (outbox.py)

Inbound = (
    Req
    | Cancel
    | Warmup
    | Configure
    | FactsRequest
    | Call
    | WindowStart
    | ProfileStart
    | ProfileStop
    | Urgent
    | Stop
)
Outbound = (
    Ready
    | LoadFailed
    | Admitted
    | TokensRun
    | Stamps
    | Done
    | Failed
    | Warmed
    | Crashed
    | FactsReply
    | Stopped
    | Called
    | CallFailed
    | Profiling
    | ProfileStopped
)

STOP: Stop = ("stop",)
URGENT: Urgent = ("urgent",)
FACTS: FactsRequest = ("facts",)
WINDOW_START: WindowStart = ("window_start",)
# Read by the worker's pipe thread straight into the urgent queue, checked every decode step.
URGENT_KINDS = ("profile_start", "profile_stop", "window_start")


def req(rid: int, prompt_ids: list[int], max_new: int, ignore_eos: bool, eos_id: int | None) -> Req:
    return ("req", rid, prompt_ids, max_new, ignore_eos, eos_id)


def tokens(stamps: tuple[int, ...], rids: list[int]) -> TokensRun:
    return ("tokens", stamps, rids)


def done(t_ns: int, rid: int, n: int) -> Done:
    return ("done", t_ns, rid, n)


def failed(t_ns: int, rids: list[int], error_type: str, message: str) -> Failed:
    return ("failed", t_ns, rids, error_type, message)


def admitted(t_ns: int, rids: list[int]) -> Admitted:
    return ("admitted", t_ns, rids)
