"""Client workers on a Ray cluster (``load.ray``): one actor per worker, spread over the nodes.

Ray places the actors (a placement group of one CPU per worker, ``SPREAD``), carries the
messages and the outcomes, and cleans up after a coordinator that dies (the actors are owned by
it). Each actor is a ``WorkerSide``, as a worker process is, plus a UDP echo of its node's clock:
monotonic clocks of two hosts differ by an unknown offset, which the coordinator measures by
round trips before t0 (``clock_sync``; Ray's own calls where UDP does not get through) and once
more after the run, for the drift. The actor then runs on its clock shifted by that offset, so
every time it stamps is on the coordinator's clock and merges with the others as it is; how
well the offset is known is recorded per worker and judged against the dispatch-lag limit.

Every node needs loadtest (the same version) and whatever its scenario reads (data files at the
same paths, the tokenizer); a node that builds a different plan is refused at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from typing import Any

from loadtest.config.loading import LoadedScenario
from loadtest.core import secrets
from loadtest.core._version import __version__
from loadtest.core.clock import OffsetClock
from loadtest.core.errors import BackendError
from loadtest.execution.clock_sync import ClockOffset, EchoServer, measure_calls, measure_udp
from loadtest.execution.live import LiveStats, LiveWants
from loadtest.execution.worker_side import HEARTBEAT_S, WorkerSide
from loadtest.execution.workers import Channel

# For tests on one host: the actor pretends its node's monotonic clock is this far ahead (a
# node started with it in its environment plays a host whose clock differs).
FAKE_SKEW_ENV = "LOADTEST_FAKE_CLOCK_SKEW_NS"


class NodeClock(OffsetClock):
    """This node's monotonic clock (read ``skew_ns`` ahead in a test that plays another host)
    on the coordinator's timeline, once its offset is set."""

    def __init__(self, skew_ns: int) -> None:
        super().__init__(0)
        self.skew_ns = skew_ns

    def node_ns(self) -> int:
        return time.monotonic_ns() + self.skew_ns

    def now_ns(self) -> int:
        return self.node_ns() - self.offset_ns

    async def sleep_until(self, t_ns: int) -> None:
        await super().sleep_until(t_ns - self.skew_ns)


class RayWorker:
    """The actor (made remote by ``ray_channels``): a worker on whatever node Ray chose. Every
    method is a coroutine, so that all of them run on the actor's one event loop, the runner's."""

    def __init__(self, loaded: LoadedScenario, index: int, count: int) -> None:
        self.clock = NodeClock(int(os.environ.get(FAKE_SKEW_ENV, "0")))
        self.side = WorkerSide(loaded, index, count, self.clock)
        self.echo: EchoServer | None = None

    async def start(self) -> dict:
        import ray

        ready = await self.side.start()
        self.echo = EchoServer(skew_ns=self.clock.skew_ns)
        ip = ray.util.get_node_ip_address()
        node = ray.get_runtime_context().get_node_id()
        ready["echo"] = (ip, self.echo.port)
        ready["version"] = __version__
        ready["where"] = {"pid": os.getpid(), "host": socket.gethostname(), "ip": ip, "node": node}
        return ready

    async def node_clock_ns(self) -> int:
        return self.clock.node_ns()

    async def set_offset(self, offset_ns: int) -> None:
        self.clock.offset_ns = offset_ns

    async def run(self, t0_ns: int):
        return await self.side.run(t0_ns)

    async def stop(self, reason: str, at_ns: int | None) -> None:
        self.side.request_stop(reason, at_ns)

    async def stats(self, wants: LiveWants) -> LiveStats | None:
        return self.side.stats(wants)

    async def close(self) -> None:
        if self.echo is not None:
            self.echo.close()
        await self.side.close()


class RayCluster:
    """This session's connection to a cluster; ``local`` starts a Ray instance on this host."""

    CONNECT_TIMEOUT_S = 60.0

    def __init__(self, address: str) -> None:
        self.address = address
        self.facts: dict = {}

    async def connect(self) -> dict:
        """Connect (bounded: Ray's own client retries an unreachable address for minutes).
        The session's signal handlers stand after it, whatever Ray installed."""
        with _signals_kept():
            return await self._connect_bounded()

    async def _connect_bounded(self) -> dict:
        if self.address == "local":
            # Started here, on this thread: Ray ties the processes it starts to the life of the
            # thread that started them (a helper thread's end would kill them). Seconds, once.
            try:
                self.facts = self._connect()
            except Exception as exc:
                raise BackendError(f"Ray (local): {exc}") from None
            return self.facts
        _reachable(self.address)
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        loop = asyncio.get_running_loop()

        def connect() -> None:  # a daemon thread: a hung connect never holds up the exit
            try:
                result: Any = self._connect()
            except BaseException as exc:
                result = exc
            loop.call_soon_threadsafe(_settle, done, result)

        threading.Thread(target=connect, name="loadtest-ray-connect", daemon=True).start()
        try:
            result = await asyncio.wait_for(done, self.CONNECT_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise BackendError(
                f"Ray cluster {self.address}: no connection within {self.CONNECT_TIMEOUT_S:g} s"
            ) from None
        if isinstance(result, BaseException):
            raise BackendError(f"Ray cluster {self.address}: {result}") from None
        self.facts = result
        return result

    def _connect(self) -> dict:
        import ray

        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
            if self.address == "local":
                # "local" by name: a new instance here, even where RAY_ADDRESS names a cluster
                kwargs.update(address="local", include_dashboard=False)
            else:
                kwargs["address"] = self.address
            with _no_failure_signal_handler():
                ray.init(**kwargs)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        return {
            "ray": ray.__version__,
            "address": self.address,
            "nodes": len(nodes),
            "cpus": int(sum(n.get("Resources", {}).get("CPU", 0) for n in nodes)),
        }

    def disconnect(self) -> None:
        import ray

        with contextlib.suppress(Exception), _signals_kept():
            ray.shutdown()


@contextlib.contextmanager
def _signals_kept():
    """Put back this process's SIGINT, SIGTERM and SIGHUP handlers after Ray's start-up.
    ``ray.init`` installs its own, in Python (on the main thread: exit at once) and in its core
    worker (C: log and die), so a SIGTERM killed the run with exit 143, no result written and
    Ray's processes left running; the session's handlers stop the run, write the partial
    result and shut Ray down."""
    import signal

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    main = threading.current_thread() is threading.main_thread()
    before = {sig: signal.getsignal(sig) for sig in sigs} if main else {}
    try:
        yield
    finally:
        for sig, handler in before.items():
            if handler is not None:  # None: set outside Python, nothing to put back
                with contextlib.suppress(OSError, ValueError):
                    signal.signal(sig, handler)  # sets the C-level handler again too


@contextlib.contextmanager
def _no_failure_signal_handler():
    """Keep Ray's C++ crash handler out of this process. The driver's core worker takes SIGTERM
    as a crash signal and, at ``ray.shutdown``, sets it back to the default at C level, under
    Python's handler: a SIGTERM in the second of shutdown after that killed the run (-15)
    before its report was done. Ray reads its switch (``RAY_DISABLE_FAILURE_SIGNAL_HANDLER``,
    from the environment at import) when the core worker starts; where a Ray lacks it,
    ``disconnect`` still puts the handlers back after the shutdown."""
    import importlib

    try:
        ray_constants: Any = importlib.import_module("ray._private.ray_constants")
    except ImportError:
        ray_constants = None
    name = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"
    before = getattr(ray_constants, name, None)
    if before is not None:
        setattr(ray_constants, name, True)
    try:
        yield
    finally:
        if before is not None:
            setattr(ray_constants, name, before)


def _settle(future: asyncio.Future, result) -> None:
    if not future.done():  # not given up on already
        future.set_result(result)


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """A ``host:port`` (or ``ray://host:port``) that nothing answers at is said at once."""
    if address in ("local", "auto"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # Ray's own parsing says what is wrong with it
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout_s).close()
    except OSError as exc:
        raise BackendError(f"Ray cluster {address}: cannot connect ({exc})") from None


class _Placement:
    """One CPU for each worker, spread over the nodes; released when the last actor closes."""

    def __init__(self, count: int, timeout_s: float) -> None:
        from ray.util.placement_group import placement_group

        self.group = placement_group([{"CPU": 1}] * count, strategy="SPREAD")
        self.count, self.open_actors, self.timeout_s = count, count, timeout_s

    async def ready(self, cluster: RayCluster) -> None:
        try:
            await asyncio.wait_for(self.group.ready(), self.timeout_s)
        except asyncio.TimeoutError:
            self.open_actors = 1
            self.release()  # the reservation would otherwise outlive the run
            raise BackendError(
                f"the Ray cluster had no room for {self.count} workers of one CPU each within "
                f"{self.timeout_s:g} s (it has {cluster.facts.get('cpus')} CPUs in "
                f"{cluster.facts.get('nodes')} nodes)"
            ) from None

    def release(self) -> None:
        from ray.util.placement_group import remove_placement_group

        self.open_actors -= 1
        if self.open_actors == 0:
            with contextlib.suppress(Exception):
                remove_placement_group(self.group)


class RayChannel:
    """The coordinator's line to one actor (``workers.Channel``)."""

    def __init__(self, actor_class, placement: _Placement, loaded, index: int, count: int):
        self._class, self._placement = actor_class, placement
        self._args = (loaded, index, count)
        self.where: dict = {}
        self._actor: Any = None
        self._echo: tuple[str, int] | None = None
        self._tasks: list[asyncio.Task] = []
        self._post: Any = None
        self._offset_set = False
        self._udp = True  # until a measurement finds that UDP does not get through

    async def open(self, post) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._post = post
        strategy = PlacementGroupSchedulingStrategy(
            self._placement.group, placement_group_bundle_index=self._args[1]
        )
        self._actor = self._class.options(
            num_cpus=1, max_restarts=0, max_concurrency=8, scheduling_strategy=strategy
        ).remote(*self._args)
        self._tasks.append(asyncio.create_task(self._start()))

    async def _start(self) -> None:
        try:
            ready = await self._actor.start.remote()
        except Exception as exc:
            self._post(_lost(exc))
            return
        self.where, self._echo = ready.pop("where"), ready.pop("echo")
        if ready["version"] != __version__:
            self._post(("error", f"loadtest {ready['version']} on its node, {__version__} here"))
            return
        self._post(("ready", ready))

    async def sync_clock(self) -> ClockOffset:
        """Measure the actor's clock against this one; the first time, it runs on it."""
        try:
            return await self._sync_clock()
        except BackendError:
            raise
        except Exception as exc:  # the actor died, or Ray's calls timed out
            raise BackendError(
                f"worker {self._args[1]}'s clock could not be measured: {_lost(exc)[1]}"
            ) from None

    async def _sync_clock(self) -> ClockOffset:
        import ray

        assert self._echo is not None
        offset = await asyncio.to_thread(measure_udp, *self._echo) if self._udp else None
        if offset is None:  # no UDP between the nodes: Ray's round trips, wider
            self._udp = False
            call = lambda: ray.get(self._actor.node_clock_ns.remote(), timeout=10)  # noqa: E731
            offset = await asyncio.to_thread(measure_calls, call)
        if not self._offset_set:
            await self._actor.set_offset.remote(offset.offset_ns)
            self._offset_set = True
        return offset

    def send(self, msg: tuple) -> None:
        if msg[0] == "go":
            self._tasks.append(asyncio.create_task(self._run(msg[1])))
            self._tasks.append(asyncio.create_task(self._heartbeat(msg[2])))
        elif msg[0] == "stop" and self._actor is not None:
            self._actor.stop.remote(msg[1], msg[2])  # fire and forget: the run's reply follows

    async def _run(self, t0_ns: int) -> None:
        try:
            outcome, facts = await self._actor.run.remote(t0_ns)
        except Exception as exc:
            self._post(_lost(exc))
            return
        self._post(("done", outcome, facts))

    async def _heartbeat(self, wants: LiveWants) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                stats = await asyncio.wait_for(self._actor.stats.remote(wants), 5.0)
            except asyncio.TimeoutError:
                continue  # silence: the coordinator's watch decides
            except Exception:
                return  # the actor is gone: the run's reply says how
            self._post(("stats", stats))

    def kill(self) -> None:
        import ray

        if self._actor is not None:
            with contextlib.suppress(Exception):
                ray.kill(self._actor)

    async def close(self, grace_s: float) -> None:
        for task in self._tasks:
            task.cancel()
        if self._actor is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._actor.close.remote(), grace_s)
            self.kill()
            self._actor = None
            self._placement.release()


def _lost(exc: BaseException) -> tuple:
    """A failed actor call as the coordinator's message: the worker's own error where it raised
    one, else the actor is gone (died, killed, its node lost)."""
    from ray.exceptions import RayTaskError

    if isinstance(exc, RayTaskError):
        cause = exc.cause if exc.cause is not None else exc
        return ("error", secrets.scrub(f"{type(cause).__name__}: {cause}"))
    return ("exited", secrets.scrub(f"the actor is gone ({type(exc).__name__}: {exc})")[:400])


async def ray_channels(cluster: RayCluster, loaded: LoadedScenario) -> list[Channel]:
    """One channel per worker on the connected cluster, their CPUs reserved."""
    import ray

    count = loaded.scenario.load.workers
    cpus = cluster.facts.get("cpus") or 0
    if cluster.address == "local" and cpus < count:  # a local instance never grows
        raise BackendError(
            f"Ray (local) has {cpus} CPUs on this host; {count} workers of one CPU each need "
            f"{count} (set load.workers to {cpus} at most, or give --ray a cluster's address)"
        )
    # inside the start's own limit, so that a full cluster is said as such and not as a
    # system under test that did not answer
    placement = _Placement(count, 0.9 * loaded.scenario.backend.start_timeout / 1e9)
    await placement.ready(cluster)
    actor_class = ray.remote(RayWorker)
    return [RayChannel(actor_class, placement, loaded, i, count) for i in range(count)]
