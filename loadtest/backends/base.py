"""The Backend protocol: the system under test, seen from the runner."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from loadtest.core.events import BackendEvent
from loadtest.workload.plan import PlannedRequest
from loadtest.workload.tokenizer import Tokenizer


@dataclass
class BackendInfo:
    """What was loaded, for the result: ``details`` lands in ``metrics.json`` as is."""

    name: str
    tokenizer: Tokenizer
    details: dict = field(default_factory=dict)


class Backend(Protocol):
    async def start(self) -> BackendInfo:
        """Load and warm up; return what was loaded. Called once, before the plan is built."""

    def submit(
        self, req: PlannedRequest, prompt_ids: list[int] | None
    ) -> AsyncIterator[BackendEvent]:
        """Run one request; yield Admitted / Tokens / Finished or Failed, each stamped."""

    async def stop(self) -> dict:
        """Release everything; return end-of-run facts (``peak_mem_mb``, ...)."""

    needs_prompt_ids: bool  # False: the runner skips materialising prompt token ids
