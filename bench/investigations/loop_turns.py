"""What fills the event loop's longest turns during a ``loadtest run`` of streamed requests.

The run is loadtest's own (``run_scenario``, in this process), on asyncio's loop with three
of its internals timed: each loop iteration's work (its ``select`` left out), each callback it
runs, named by what it is (a task by its coroutine, a socket's reads, a runner's callback), and
the sockets each ``select`` found ready. Against the fast server (one process: every stream's
token in one step, as one engine steps its batch), Poisson arrivals at ``--rate``.

Printed: the run's own verdict, the iterations' work at p50, p99 and the longest; in the
iterations at or past p99, what their work was, on average, and in how many of them; each
kind's share of all the loop's work; and the collector's pauses. The timing adds about a µs a
callback, so absolute figures are a little high; the split is what to read.

    python bench/investigations/loop_turns.py --rate 250
"""

from __future__ import annotations

import argparse
import array
import asyncio
import asyncio.base_events
import asyncio.events
import collections
import gc
import os
import selectors
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["LOADTEST_EVENT_LOOP"] = "asyncio"  # the loop whose internals are timed here

LONG_NS = 100_000  # an iteration's callbacks are kept by name from this much work


class Turns:
    """The loop's iterations, timed: every one's work in an array (no object an iteration for
    the collector to trace), the long ones' callbacks by name."""

    def __init__(self) -> None:
        self.work = array.array("q")
        self.long: list[dict[str, int]] = []
        self.share: collections.Counter[str] = collections.Counter()
        self.current: dict[str, int] = {}
        self.gc_pauses: list[tuple[int, int]] = []  # (generation, ns)

    def install(self) -> None:
        now, turns = time.perf_counter_ns, self
        run, run_once = asyncio.events.Handle._run, asyncio.base_events.BaseEventLoop._run_once
        select = selectors.EpollSelector.select

        def timed_run(handle: asyncio.events.Handle) -> None:
            t = now()
            run(handle)
            d, name = now() - t, kind(handle)
            turns.current[name] = turns.current.get(name, 0) + d
            turns.share[name] += d

        def timed_once(loop: asyncio.base_events.BaseEventLoop) -> None:
            turns.current = {}
            t = now()
            run_once(loop)
            work = now() - t - turns.current.pop("(select)", 0)
            turns.work.append(work)
            if work >= LONG_NS:
                turns.long.append(turns.current | {"(work)": work})

        def timed_select(selector: selectors.EpollSelector, timeout: float | None = None):
            t = now()
            ready = select(selector, timeout)
            turns.current["(select)"] = turns.current.get("(select)", 0) + now() - t
            turns.current["(ready sockets)"] = len(ready)
            return ready

        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]
        asyncio.base_events.BaseEventLoop._run_once = timed_once  # type: ignore[method-assign]
        selectors.EpollSelector.select = timed_select  # type: ignore[method-assign]
        started = [0]

        def on_gc(phase: str, info: dict) -> None:
            if phase == "start":
                started[0] = now()
            else:
                turns.gc_pauses.append((info["generation"], now() - started[0]))

        gc.callbacks.append(on_gc)


def kind(handle: asyncio.events.Handle) -> str:
    """What a callback is: a task by its coroutine, else its object's class and method."""
    callback = handle._callback  # type: ignore[attr-defined]
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        return "task " + getattr(owner.get_coro(), "__qualname__", "?")
    if owner is not None:
        return f"{type(owner).__name__}.{getattr(callback, '__name__', '?')}"
    return getattr(callback, "__qualname__", type(callback).__name__)


def report(turns: Turns) -> None:
    work = sorted(turns.work)
    p50, p99 = work[len(work) // 2], work[int(len(work) * 0.99)]
    print(
        f"{len(work):,} iterations; their work p50 {p50 / 1e3:.0f} µs, p99 {p99 / 1e3:.0f} µs, "
        f"the longest {work[-1] / 1e3:,.0f} µs"
    )
    cut = max(p99, LONG_NS)
    long = [c for c in turns.long if c["(work)"] >= cut]
    ready = sum(c.get("(ready sockets)", 0) for c in long) / max(1, len(long))
    print(
        f"\nthe {len(long)} iterations of {cut / 1e3:.0f} µs of work or more "
        f"({ready:.1f} sockets ready in each):"
    )
    print("| what | µs an iteration | in how many |")
    print("|---|---|---|")
    total: collections.Counter[str] = collections.Counter()
    seen: collections.Counter[str] = collections.Counter()
    for c in long:
        for name, ns in c.items():
            if not name.startswith("("):
                total[name] += ns
                seen[name] += 1
    for name, ns in total.most_common(10):
        print(f"| {name} | {ns / len(long) / 1e3:.1f} | {seen[name]} |")
    all_work = sum(turns.share.values())
    print("\n| what | share of all the loop's work |")
    print("|---|---|")
    for name, ns in turns.share.most_common(10):
        print(f"| {name} | {ns / all_work:.1%} |")
    by_gen: dict[int, list[int]] = collections.defaultdict(list)
    for generation, ns in turns.gc_pauses:
        by_gen[generation].append(ns)
    print("\ncollections (generation 2's include the one that settles the heap before t0):")
    for generation, pauses in sorted(by_gen.items()):
        pauses.sort()
        print(
            f"- generation {generation}: {len(pauses)}, p50 {pauses[len(pauses) // 2] / 1e3:.0f} "
            f"µs, p99 {pauses[int(len(pauses) * 0.99)] / 1e3:.0f} µs"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=250.0, help="req/s")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--server-cores", default="0")
    ap.add_argument("--client-core", default="1")
    args = ap.parse_args()
    import yaml

    from bench.token_capacity import MODEL, Server, one_token_text
    from loadtest import load_scenario, run_scenario
    from tests import real_servers

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in args.client_core.split(",")})
    work = Path(tempfile.mkdtemp(prefix="loop-turns-"))
    tokenizer = str(real_servers.build_vllm_model(work / "model"))
    server = Server(args.server_cores, 1, 1.0, work, one_token_text(tokenizer))
    scenario = {
        "name": "loop-turns",
        "seeds": {"schedule": 0, "prompts": 0, "lengths": 0},
        "backend": {
            "kind": "openai", "base_url": server.url + "/v1", "model": MODEL,
            "tokenizer": tokenizer, "api": "completions",
        },
        "workload": {"input_tokens": 16, "output_tokens": 256},
        "load": {
            "arrival": {"kind": "poisson", "rate": args.rate},
            "requests": int(args.rate * args.seconds),
        },
        "telemetry": {"server": False, "gpu": False},
    }  # fmt: skip
    path = work / "scenario.yml"
    path.write_text(yaml.safe_dump(scenario))
    turns = Turns()
    turns.install()
    try:
        got = run_scenario(load_scenario(str(path), []), str(work / "run")).metrics
    finally:
        server.stop()
    harness = got["harness"]
    print(
        f"# {args.rate:g} req/s, 256 tokens each, for {args.seconds:g} s: the run judged itself "
        f"{'valid' if got['validity']['valid'] else 'invalid'}; event-loop lag p99 "
        f"{harness['loop_lag_ms']['p99']} ms; loop busy {harness['loop_busy']:.0%}"
    )
    report(turns)


if __name__ == "__main__":
    main()
