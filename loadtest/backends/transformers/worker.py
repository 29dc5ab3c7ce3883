"""The engine worker process: its entry point, the pipe from the harness read on a thread of its
own, and the engine (``engine.Engine``: the model, the batcher, the stamps) served from it.

Runs in its own process (spawned): a Python ``generate()`` loop holds the GIL and would delay
the harness's dispatch, and a process isolates a CUDA OOM or crash. The harness and the worker
speak the protocol in ``messages.py`` over two one-way pipes.

Token stamps are taken in this process (stamping.py). Messages are built and written by the
outbox's thread, off the decode loop.

Engine hooks, for code that must run beside the model (bench/ and tests, never a scenario):
``TransformersBackend.engine_hooks`` names ``module:function`` callables the worker calls with the
``Engine`` once the model is loaded (a test installs a fault in ``Engine.before_batch`` this way),
and ``TransformersBackend.call_in_engine("module:function", *args)`` runs ``function(engine,
*args)`` in the worker between runs and returns its (picklable) result (bench/ times a bare
generate() loop on the loaded model this way).
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections import deque
from multiprocessing.connection import Connection

from loadtest.backends.transformers import messages
from loadtest.backends.transformers.engine import Engine, resolve_hook
from loadtest.backends.transformers.layout import Layout
from loadtest.backends.transformers.outbox import Outbox
from loadtest.config.transformers_spec import TransformersSpec


def main(
    inbox_conn: Connection,
    outbox_conn: Connection,
    spec: TransformersSpec,
    base_dir: str,
    hooks: tuple[str, ...] = (),
    layout: Layout | None = None,
) -> None:
    """The engine worker process's entry point (spawned by TransformersBackend); with a
    tensor-parallel ``layout``, rank 0 of its group (``parallel``)."""
    import signal
    import sys

    # Ctrl-C at a terminal reaches every process of its group: the harness handles it (the
    # partial result, then stop), and stops this process itself; a traceback here says nothing
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The generate() loop holds the GIL; the pipe reader needs it for every message. At the
    # default 5 ms switch interval a burst of requests trickles in one per 5 ms and batches start
    # half empty; 0.5 ms lets the reader keep up.
    sys.setswitchinterval(0.0005)
    out = Outbox(outbox_conn)
    try:
        _serve(inbox_conn, out, spec, base_dir, hooks, layout)
    except Exception as exc:
        # Say why before dying: the harness reports this, not only an exit code
        crashed: messages.Crashed = (
            "crashed",
            f"{type(exc).__name__}: {exc}",
            traceback.format_exc(limit=8),
        )
        out.send(crashed)
        raise
    finally:
        out.close()


def _serve(
    inbox_conn: Connection,
    out: Outbox,
    spec: TransformersSpec,
    base_dir: str,
    hooks: tuple[str, ...],
    layout: Layout | None,
) -> None:
    try:
        engine = Engine(spec, base_dir, out, layout=layout)
        for hook in hooks:
            resolve_hook(hook)(engine)
    except Exception as exc:  # load failure: say why, then exit
        out.send(("load_failed", f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=5)))
        return
    inbox: queue.Queue = queue.Queue()
    cancelled: set = set()
    threading.Thread(
        target=_pump, args=(inbox_conn, inbox, cancelled, engine.urgent), daemon=True
    ).start()
    if spec.mode == "continuous":
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
        served = engine  # type: ignore[assignment]  # both serve(inbox, cancelled)
    out.send(("ready", engine.info))
    served.serve(inbox, cancelled)


def _pump(conn: Connection, inbox: queue.Queue, cancelled: set[int], urgent: deque) -> None:
    """Reads the parent's pipe into a queue the engine can poll with a timeout. Profiler commands
    also go to ``urgent``, which the engine checks at every decode step: a capture window opens and
    closes on time even in the middle of a long batch."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            inbox.put(messages.STOP)
            return
        if msg[0] == "cancel":
            cancelled.add(msg[1])
        elif msg[0] in messages.URGENT_KINDS:
            urgent.append(msg)
            inbox.put(messages.URGENT)  # wakes an idle engine
        else:
            inbox.put(msg)
