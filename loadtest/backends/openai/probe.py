"""Reaching the server before the run: one small request to each endpoint, which finds how the
server takes a fixed output length (``ignore_eos``, or a generation config), which model it
answers as, and whether its answers are what every request will read (a stream that is not an
OpenAI stream fails the start, not every request)."""

from __future__ import annotations

import json
from collections import Counter

from loadtest.backends.openai.bodies import RequestBodies
from loadtest.backends.openai.discovery import list_models
from loadtest.backends.openai.events import BadResponse
from loadtest.backends.openai.pooling import read_answer
from loadtest.backends.openai.routes import Route
from loadtest.backends.openai.stream import Stream
from loadtest.backends.openai.tokens import TokenCounter
from loadtest.backends.openai.unstreamed import read_unstreamed
from loadtest.config.backend_specs import OpenAISpec
from loadtest.core.clock import Clock
from loadtest.core.errors import BackendError
from loadtest.core.events import Failed
from loadtest.core.loop import in_daemon_thread
from loadtest.core.text import visible
from loadtest.transport.calls import error_text
from loadtest.transport.http1 import HttpFailure
from loadtest.transport.settings import ClientSettings
from loadtest.transport.wire import Wire

PROBE_TOKENS = 2
LIST_TIMEOUT_S = 10.0  # an endpoint's model list, asked at start


class Probe:
    """The probe requests of one backend: ``server_model`` is the model the server answered
    as; the stream's chunks teach ``tokens`` how the server counts."""

    def __init__(
        self,
        spec: OpenAISpec,
        bodies: RequestBodies,
        tokens: TokenCounter,
        clock: Clock,
        pooled: bool,
    ) -> None:
        self.spec, self.bodies, self.tokens, self.clock = spec, bodies, tokens, clock
        self.pooled = pooled
        self.server_model: str | None = None
        self.answered_as: str | None = None  # the model the latest probe's answer named

    async def fixed_output(self, route: Route) -> str:
        """Reach the server (a 2-token request) and find how it takes fixed output lengths;
        embeddings and rerank: one small request (they have no output to fix)."""
        if self.pooled:
            status, text = await self.once(None, route)
            if status >= 300:
                raise BackendError(f"{route.url}: probe request failed: HTTP {status}: {text}")
            return "none"
        modes = (
            [self.spec.fixed_output]
            if self.spec.fixed_output != "auto"
            else ["ignore_eos", "generation_config"]
        )
        last = ""
        for via in modes:
            if via == "none":
                break
            status, text = await self.once(via, route)
            if status < 300:
                return via
            last = f"HTTP {status}: {text}"
            if status not in (400, 422):  # not a refused field: the server or model is the problem
                raise BackendError(f"{route.url}: probe request failed: {last}")
        status, text = await self.once(None, route)
        if status >= 300:
            raise BackendError(f"{route.url}: probe request failed: HTTP {status}: {text}")
        if self.spec.fixed_output not in ("auto", "none"):
            raise BackendError(
                f"{route.url}: the server refused fixed_output={self.spec.fixed_output}: {last}"
            )
        return "none"

    async def the_others(self, routes: list[Route], via: str) -> None:
        """Every other endpoint answers the probe the first answered, and as the same model:
        one that fails it would fail its share of the run, and one that answers as another
        model is another deployment, whose figures would be pooled with the first's as one
        model's; either way the run does not start."""
        first = self.answered_as
        for route in routes[1:]:
            self.answered_as = None
            status, text = await self.once(None if via == "none" else via, route)
            if status >= 300:
                raise BackendError(f"{route.url}: probe request failed: HTTP {status}: {text}")
            if first and self.answered_as and self.answered_as != first:
                raise BackendError(
                    f"{route.label}: answers as model {visible(self.answered_as)!r}, where "
                    f"{routes[0].label} answers as {visible(first)!r}: two deployments, not "
                    "endpoints of one model (backend.endpoints lists endpoints of one model; "
                    "run each deployment on its own to compare them)"
                )

    async def each_lists_the_model(
        self, routes: list[Route], api_key: str | None, settings: ClientSettings
    ) -> None:
        """Several endpoints: each is asked what it serves (``/models``), and one that lists
        models without the scenario's is refused (a server that answers any name as its own
        model would otherwise pass the probe). One with no model list is judged by its
        probe's answer alone."""
        if len(routes) < 2:
            return
        for route in routes:
            try:
                listed = await in_daemon_thread(
                    list_models, route.base, api_key, LIST_TIMEOUT_S, settings
                )
            except BackendError:
                continue  # no model list there: the probe's answer is what there is
            if listed and self.spec.model not in listed:
                shown = ", ".join(repr(visible(m)) for m in listed[:5])
                raise BackendError(
                    f"{route.label}: serves {shown}, not {self.spec.model!r}: each of "
                    "backend.endpoints must serve the scenario's model"
                )

    async def once(self, via: str | None, route: Route) -> tuple[int, str]:
        """One probe request: its status, and the server's words where it refused."""
        url = route.url
        body = (
            self.bodies.pooled_body(["hello", "hello"])
            if self.pooled
            else self.bodies.streaming("hello", None, PROBE_TOKENS, via, Counter())
        )
        try:
            resp = await route.pool.request(
                "POST", url, json.dumps(body, allow_nan=False).encode(), Wire()
            )
            try:
                if resp.status >= 300:
                    return resp.status, await error_text(resp)
                if self.pooled:
                    await read_answer(resp, self.spec.api, 2)
                    return resp.status, ""
                # read to its end (bounded: a stream past a few chunks a token is refused)
                stream = Stream(self.spec.api, PROBE_TOKENS, keep_reply=False)
                if not self.spec.stream:
                    await read_unstreamed(resp, stream, self.clock.now_ns)
                    self.answered_as = stream.model
                    self.server_model = self.server_model or stream.model
                    return resp.status, ""
                ended = await stream.read(resp.batch, self.clock.now_ns, None, resp.reads)
                if isinstance(ended, Failed):  # what every request would end in: say so now
                    kind = visible(resp.headers.get("content-type", "no Content-Type")[:60])
                    raise BackendError(
                        f"{url}: the probe's answer (HTTP {resp.status}, {kind}) is not an "
                        f"OpenAI stream: {ended.error_type}: {ended.message}"
                    )
                self.answered_as = stream.model
                self.server_model = self.server_model or stream.model
                self.tokens.learn(stream.chunks, stream.usage)
                return resp.status, ""
            finally:
                resp.release()
        except BadResponse as exc:
            what = "stream" if self.spec.stream else "answer"
            raise BackendError(
                f"{url}: the probe's answer is not an OpenAI {what}: {exc}"
            ) from None
        except HttpFailure as exc:
            raise BackendError(f"{url}: cannot reach the server: {exc}") from None
