"""``kind: noop``: every request answered at once with all its tokens. Measures the harness alone."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from loadtest.backends.base import Backend, BackendInfo, Facts
from loadtest.config.backend_specs import NoopSpec
from loadtest.core.events import Admitted, BackendEvent, Cancelled, Finished, Tokens
from loadtest.workload.requests import PlannedRequest
from loadtest.workload.tokenizer import ByteTokenizer


class NoopBackend(Backend[NoopSpec]):
    """Answers every request at once with its tokens: measures the harness alone."""

    needs_prompt_ids = False

    async def start(self) -> BackendInfo:
        return BackendInfo("noop", ByteTokenizer())

    async def submit(
        self, req: PlannedRequest, prompt_ids: list[int] | None
    ) -> AsyncGenerator[BackendEvent | Cancelled, None]:
        now = self.clock.now_ns()
        yield Admitted(now)
        yield Tokens((now,) * req.output_tokens)
        yield Finished(now, req.output_tokens, req.input_tokens)

    async def stop(self) -> Facts:
        return {}
