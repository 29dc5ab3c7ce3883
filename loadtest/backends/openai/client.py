"""``kind: openai``: a served model behind an OpenAI-compatible API, streamed over SSE (``http1``).

Each request is one streaming POST (``stream.Stream`` reads it). Every network read is stamped
on arrival (``monotonic_ns``); once the stream is done its text is counted in tokens: with the
model's tokenizer when there is one (a chunk may carry several tokens), else one token per
chunk. When the server streams ``usage``, its count is the truth: the stamps are reconciled to
it (``tokens.TokenCounter``) and every disagreement is counted and reported. TTFT counts from
the intended send time (the runner).

Failures are classified and counted (``http_429``, ``connect_error``, ``server_disconnected``,
...). A server that stops accepting connections, ``fail_after_connect_errors`` in a row with
none succeeding, is down: the run ends with status failed and what it measured. The API key is
read from an environment variable and never written anywhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections import Counter
from collections.abc import AsyncGenerator

from loadtest.backends.base import Backend, BackendContext, BackendInfo, Facts
from loadtest.backends.openai import connection
from loadtest.backends.openai.bodies import PATHS, RequestBodies
from loadtest.backends.openai.cancel_at import until_stop
from loadtest.backends.openai.discovery import without_credentials
from loadtest.backends.openai.endings import pooled_end, streamed_end, unstreamed_end
from loadtest.backends.openai.events import BadResponse
from loadtest.backends.openai.facts import described, report
from loadtest.backends.openai.outputs import OutputChecks
from loadtest.backends.openai.pooling import read_answer
from loadtest.backends.openai.probe import Probe
from loadtest.backends.openai.routes import Route, Router
from loadtest.backends.openai.sizing import no_tokenizer_notice, prompt_sizing
from loadtest.backends.openai.stream import Stream
from loadtest.backends.openai.tokens import (
    TokenCounter,
    load_tokenizer,
)
from loadtest.backends.openai.unstreamed import read_unstreamed
from loadtest.config.apis import POOLING_APIS
from loadtest.config.backend_specs import OpenAISpec
from loadtest.config.observing import Profile
from loadtest.core.clock import Clock
from loadtest.core.errors import BackendError
from loadtest.core.events import BackendEvent, Cancelled, Failed, Tokens
from loadtest.core.json_types import object_in, text_in
from loadtest.core.loop import in_daemon_thread
from loadtest.core.request_ids import RequestIds
from loadtest.transport.calls import error_text
from loadtest.transport.http1 import HttpFailure, Response
from loadtest.transport.pool import ConnectionPool
from loadtest.transport.wire import Wire
from loadtest.workload.content import Content
from loadtest.workload.media import MEDIA_SETS_OPEN_ENDED
from loadtest.workload.plan import Plan
from loadtest.workload.requests import PlannedRequest
from loadtest.workload.tokenizer import ByteTokenizer


class OpenAIBackend(Backend[OpenAISpec]):
    """An OpenAI-compatible server over HTTP (chat or completions), streamed."""

    supports_profiling = True  # the server's own profiler, where it has endpoints for it
    needs_prompt_ids = True  # synthetic prompts are token ids of the model's tokenizer, as text
    stops_itself = True  # a stream is read in one go: a cancelled one is stopped here

    def __init__(
        self, spec: OpenAISpec, clock: Clock, context: BackendContext | None = None
    ) -> None:
        super().__init__(spec, clock, context)
        self.base_dir = self.context.base_dir
        # requests go to the URL without its credentials; they travel as a header (start())
        self._base = without_credentials(spec.base_url)
        self.url = self._base.rstrip("/") + PATHS[spec.api]
        self._pooled = spec.api in POOLING_APIS
        self._pool: ConnectionPool | None = None  # once started: the first endpoint's
        self._router: Router | None = None  # every endpoint's, once started
        self._tokens = TokenCounter(None, clock.now_ns)
        self._bodies = RequestBodies(spec, ByteTokenizer(), fit=False)
        self.facts: Counter[str] = Counter()
        self.server_model: str | None = None
        self._checks = OutputChecks(Content())
        self._described: dict = {}  # what the run's requests carry and are checked for
        # a correlation id a request (unless the user's own headers name the same header)
        header = spec.request_id_header
        if header.lower() in {name.lower() for name in spec.headers}:
            header = ""
        self._ids = RequestIds(header, self.context.traced, self.context.trace_ratio)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> BackendInfo:
        # hub lookups, file reads and the tokenizer library's imports off the loop, on a
        # daemon thread: start_timeout bounds them, and one it leaves importing torch holds
        # up no exit (the environment manifest reads only modules whose import has finished)
        spec = self.spec
        key = self._api_key()
        try:
            self.settings = connection.client_settings(spec, self.base_dir)
            routes = connection.open_routes(spec, self.base_dir, self.clock.now_ns)
        except ValueError as exc:
            raise BackendError(f"backend: {exc}") from None
        self._router = Router(routes, spec.routing)
        self._pool = pool = routes[0].pool
        tokenizer, tokenizer_source, count = await in_daemon_thread(
            load_tokenizer, spec.tokenizer, spec.model, spec.base_url, key, self.base_dir,
            self.settings,
        )  # fmt: skip
        self._tokens.count = count
        self._bodies = RequestBodies(spec, tokenizer, fit=count is not None)
        probe = Probe(spec, self._bodies, self._tokens, self.clock, self._pooled)
        try:
            await probe.each_lists_the_model(routes, key, self.settings)
            self._bodies.fixed_via = await probe.fixed_output(routes[0])
            await probe.the_others(routes, self._bodies.fixed_via)
        except BackendError:
            await self.stop()
            raise
        self.server_model = probe.server_model
        tokenizer, sizing = await prompt_sizing(spec, tokenizer, bool(count), pool, self._base)
        self._bodies.tokenizer = tokenizer
        details = described(
            spec,
            server_model=self.server_model,
            fixed_via=self._bodies.fixed_via,
            tokenizer=tokenizer_source,
            counts_tokens=bool(count),
            proxy=pool.proxy.origin if pool.proxy else "none",
            sizing=sizing,
            streamed=spec.stream and not self._pooled,
        )
        notices = [] if count else [no_tokenizer_notice(spec.model, tokenizer)]
        return BackendInfo(f"{spec.model} @ {spec.base_url}", tokenizer, details, notices)

    async def prepare(self, plan: Plan) -> Facts:
        """Keep the plan (dataset rows are sent as their text or chat messages, with its tools
        and answer format), and render its media before t0."""
        self._bodies.use_plan(plan)
        assert self._pool is not None  # started
        await connection.check_serves(self._pool, self._base, self.url, set(plan.models))
        self._checks = OutputChecks(plan.content)
        self._described = self._checks.describe()
        if plan.media is not None:
            # a closed loop with no request count: as many sets as an open-ended run cycles
            count = plan.planned_count or len(plan.requests) or MEDIA_SETS_OPEN_ENDED
            await asyncio.to_thread(plan.media.render, count)
            self._described["media"] = plan.media.describe()
            self._described["media"]["distinct_sets"] = len(plan.media.sets)
        return {"content": self._described} if self._described else {}

    async def point_facts(self) -> Facts:
        """What the client saw this point: HTTP statuses, pool waits, bad responses, usage checks."""
        facts, self.facts = self.facts, Counter()
        return report(facts, self.spec.max_connections, self._bodies.fixed_via, self._described)

    @classmethod
    def combine_facts(cls, spec: OpenAISpec, details: Facts, parts: list[Facts]) -> Facts:
        """Worker processes' facts as one client's: the counters summed, then described."""
        total: Counter[str] = Counter()
        for part in parts:
            for name, count in object_in(part, "http").items():
                if isinstance(count, int):
                    total[name] += count
        return report(
            total,
            spec.max_connections,
            text_in(details, "fixed_output_via"),
            object_in(details, "content"),
        )

    async def stop(self) -> Facts:
        if self._router is not None:
            for route in self._router.routes:
                await route.pool.close()
            self._router = None
        self._pool = None
        return {}

    # -- one request ------------------------------------------------------------------------

    async def submit(
        self, req: PlannedRequest, prompt_ids: list[int] | None
    ) -> AsyncGenerator[BackendEvent | Cancelled, None]:
        now = self.clock.now_ns
        # warm-up requests are not the run's: what they show is not reported
        facts = self.facts if not req.warmup else Counter()
        body = self._bodies.for_request(req, prompt_ids, facts)
        stream = Stream(
            self.spec.api,
            req.output_tokens,
            keep_reply=req.history is not None,
            keep_answer=self._checks.active or req.keep_answer,
        )
        pooled: tuple[int | None, str | None] | None = None
        wire = Wire()
        failure: Failed | Cancelled | None = None
        partial = True  # a failed stream's tokens so far are kept (not when it never started)
        # a request the plan cancels wakes its reader at every read, so that what it had read
        # at the cancel is taken; the rest in batches (the same stamps, less work)
        cancels = req.stop_at_ns is not None or req.stop_after_tokens is not None
        router = self._router
        assert router is not None
        route = router.pick()
        rid, head = self._ids.next() if self._ids.active else (None, b"")
        try:
            resp = await route.pool.request(
                "POST",
                route.url,
                json.dumps(body, allow_nan=False).encode(),
                wire,
                eager=cancels,
                head=head,
            )
            try:
                route.connect_errors = 0
                yield wire.sent(route.label if router.several else None, rid)
                if resp.status >= 300:  # an error, or a redirect (not followed)
                    facts[f"http_{resp.status}"] += 1
                    yield Failed(now(), f"http_{resp.status}", await error_text(resp))
                    return
                failure, partial, pooled = await self._read(resp, req, stream)
                if isinstance(failure, Cancelled):
                    resp.close()  # the connection goes: the server sees the client leave
            finally:
                resp.release()
        except Exception as exc:
            failed = _request_failure(exc, facts, route, self.clock.now_ns(), self.spec)
            if failed is None:
                raise
            failure, partial = failed
        finally:
            router.done(route)
            self.server_model = self.server_model or stream.model
            if stream.model and stream.model != self.server_model:  # not the model asked for
                facts["other_model"] += 1
                facts[f"other_model@{route.label}"] += 1
            if wire.queued_ns:
                facts["connection_waits"] += 1
                facts["connection_wait_ns"] += wire.queued_ns
        if failure is not None:
            if partial and stream.chunk_ns:
                yield Tokens(tuple(self._tokens.partial(stream.chunks)))
            if isinstance(failure, Failed):
                where = route.label if router.several else None
                failure = dataclasses.replace(failure, endpoint=where, request_id=rid)
            yield failure
            return
        if pooled is not None:  # one JSON answer: no tokens, its end is the request's
            api, count = self.spec.api, self._tokens.count
            yield pooled_end(req, pooled, facts, api == "embeddings" and bool(count), now())
            return
        if self._checks.active:
            self._checks.check(stream, facts)
        end = streamed_end if self.spec.stream else unstreamed_end
        for event in end(req, stream, facts, self._tokens, self._bodies.fixed_via, now):
            yield event

    async def _read(
        self, resp: Response, req: PlannedRequest, stream: Stream
    ) -> tuple[Failed | Cancelled | None, bool, tuple[int | None, str | None] | None]:
        """The answer read as the API gives it, until the plan's cancel: how it failed (None:
        it did not), whether a failure keeps the tokens read before it, and a pooling API's
        answer (its prompt tokens and response id)."""
        now = self.clock.now_ns
        if self._pooled:
            answer = await until_stop(self.clock, req, read_answer(resp, self.spec.api, req.inputs))
            if isinstance(answer, Cancelled):
                return answer, True, None
            return None, True, answer
        if not self.spec.stream:  # one JSON answer, read whole
            return (
                await until_stop(self.clock, req, read_unstreamed(resp, stream, now)),
                False,
                None,
            )
        failure = await until_stop(
            self.clock, req, stream.read(resp.batch, now, req.stop_after_tokens, resp.reads)
        )
        # a server's error event ends what it streamed: its tokens so far are not the answer's
        partial = not isinstance(failure, Failed) or failure.error_type != "server_error"
        return failure, partial, None

    # -- set-up -------------------------------------------------------------------------------

    def _api_key(self) -> str | None:
        return os.environ.get(self.spec.api_key_env) or None

    # -- the server's profiler -------------------------------------------------------------

    async def profile_start(self, options: Profile) -> str | None:
        """The server's own profiler on (vLLM's ``POST /start_profile``, which it serves when
        started with ``--profiler-config``): None when it answered, else why not."""
        return await connection.profilers_call(self._every_route(), "start_profile")

    def _every_route(self) -> list[Route]:
        return [] if self._router is None else self._router.routes

    async def profile_stop(self, out_dir: str) -> Facts:
        """The server's profiler off (the profile window bounds the wait: a server writes its
        traces before it answers); where its traces are is the server's business."""
        stopped = await connection.profilers_call(self._every_route(), "stop_profile")
        if stopped is not None:
            return {"profiler": f"the server's: started, but stopping failed ({stopped})"}
        return {
            "profiler": "the server's (POST /start_profile, /stop_profile): its traces are "
            "written on the server's host (vLLM: where --profiler-config's torch_profiler_dir "
            "says)"
        }


def _request_failure(
    exc: Exception, facts: Counter, route: Route, t: int, spec: OpenAISpec
) -> tuple[Failed, bool] | None:
    """The failure a request ended in, classified, and whether the tokens it streamed are
    kept (not when it never connected); None for an exception that is not a request's. A
    failed connection counts against its endpoint (``Route.connect_failed``)."""
    if isinstance(exc, BadResponse):
        facts["bad_response"] += 1
        return Failed(t, "bad_response", str(exc)[:300]), True
    if not isinstance(exc, HttpFailure):
        return None
    if exc.connecting:
        route.connect_failed(exc, spec.fail_after_connect_errors)
    return Failed(t, exc.kind, str(exc)[:300]), not exc.connecting
