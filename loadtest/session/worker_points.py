"""A session's points that run in worker processes (``load.workers`` > 1) or Ray actors
(``load.ray``): the group of one point, and the Ray cluster, connected once a session."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from loadtest.config.loading import LoadedScenario
from loadtest.core.clock import Clock
from loadtest.execution.process_workers import process_channels
from loadtest.execution.workers import Channel, WorkerGroup, WorkerReady

if TYPE_CHECKING:
    from loadtest.execution.ray_workers import RayCluster


class WorkerPoints:
    """The worker group of the point under way (each point starts its own), and the Ray
    cluster that a session's points share."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.group: WorkerGroup | None = None
        self._ray: RayCluster | None = None  # connected at the first point that asks for one

    async def start(self, loaded: LoadedScenario) -> tuple[WorkerReady, dict[str, object]]:
        """This point's workers, started and ready within ``backend.start_timeout``, and the
        facts of their placement (how many; the Ray cluster's)."""
        scenario = loaded.scenario
        details: dict[str, object] = {"workers": scenario.load.workers}
        if scenario.load.ray is not None:
            cluster, channels = await self._ray_channels(loaded, scenario.load.ray)
            details["ray"] = cluster.facts
        else:
            channels = process_channels(loaded)
        self.group = WorkerGroup(loaded, self.clock, channels)
        ready = await self.group.start(scenario.backend.start_timeout / 1e9)
        return ready, details

    async def _ray_channels(
        self, loaded: LoadedScenario, address: str
    ) -> tuple[RayCluster, list[Channel]]:
        """The Ray cluster at ``address`` (connected once a session) and actors on it."""
        from loadtest.execution.ray_workers import RayCluster, ray_channels

        if self._ray is not None and self._ray.address != address:
            await asyncio.to_thread(self._ray.disconnect)
            self._ray = None
        if self._ray is None:
            cluster = RayCluster(address)
            await cluster.connect()
            self._ray = cluster
        return self._ray, await ray_channels(self._ray, loaded)

    async def close_group(self) -> None:
        """The point's workers stopped."""
        if self.group is not None:
            group, self.group = self.group, None
            await group.close()

    async def close(self) -> None:
        """The workers stopped and the Ray cluster let go."""
        await self.close_group()
        if self._ray is not None:
            ray, self._ray = self._ray, None
            await asyncio.to_thread(ray.disconnect)
