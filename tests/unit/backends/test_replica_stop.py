"""The replica router's stop: every replica is stopped, whatever another's stop does, and a
failed stop is raised, not dropped (an engine left running would outlive the run)."""

from __future__ import annotations

import asyncio

import pytest

from loadtest.backends.transformers.replicas import ReplicaRouter
from loadtest.config.transformers_spec import TransformersSpec
from loadtest.core.clock import VirtualClock


class _Replica:
    def __init__(self, fails: bool, facts: dict) -> None:
        self.fails, self.facts, self.stopped = fails, facts, False

    async def stop(self) -> dict:
        await asyncio.sleep(0)
        self.stopped = True
        if self.fails:
            raise RuntimeError("the engine would not stop")
        return self.facts


def _router(replicas: list[_Replica]) -> ReplicaRouter:
    spec = TransformersSpec(model="dummy:tiny-llama", devices=["cpu", "cpu"])
    router = ReplicaRouter(spec, VirtualClock(), None, spec.device_groups())
    router.replicas = replicas  # type: ignore[assignment]
    return router


def test_every_replica_stops_and_a_failed_stop_is_raised():
    replicas = [_Replica(True, {}), _Replica(False, {"batches": 3})]
    with pytest.raises(RuntimeError, match="would not stop"):
        asyncio.run(_router(replicas).stop())
    assert [r.stopped for r in replicas] == [True, True]


def test_stopped_replicas_facts_are_summed():
    replicas = [_Replica(False, {"batches": 3}), _Replica(False, {"batches": 4})]
    assert asyncio.run(_router(replicas).stop())["batches"] == 7
