"""Scenario models of the systems under test, one per ``kind``.

They live here, apart from the backends, so that validating a scenario never imports torch or
transformers. Each backend module registers its implementation under the same ``kind``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator

from loadtest.config.spec import Problem, Spec
from loadtest.config.transformers_spec import TransformersSpec
from loadtest.config.types import Duration, PositiveDuration, as_written
from loadtest.core import secrets
from loadtest.transport.endpoint import Endpoint
from loadtest.transport.settings import proxy_endpoint


class Stall(Spec):
    """An interval in which the simulated server makes no progress."""

    at: Duration = Field(description="When the stall starts, from t0 (e.g. 10s).")
    for_: Duration = Field(alias="for", description="How long nothing progresses (e.g. 2s).")


class SimSpec(Spec):
    """A FIFO server with ``max_concurrency`` slots; the harness's test double and a dry-run mode."""

    kind: Literal["sim"] = "sim"
    serves_in_client_loop: ClassVar[bool] = True
    workers_refused: ClassVar[str | None] = (
        "the simulated server is one queue in one process: each worker would simulate a "
        "server of its own"
    )
    start_timeout: PositiveDuration = Field(
        as_written("10s"), description="Longest the backend may take to start."
    )
    max_concurrency: int = Field(
        1, ge=1, description="Requests served at once; the rest wait FIFO."
    )
    prefill_ms_per_token: float = Field(
        0.1, ge=0, description="Time to first token per input token, after a slot is free."
    )
    decode_ms_per_token: float = Field(5.0, ge=0, description="Time between output tokens.")
    stalls: tuple[Stall, ...] = Field(
        (), description="Intervals with no progress: [{at: 10s, for: 2s}]."
    )
    fail_every: int | None = Field(
        None, ge=1, description="Every Nth submitted request fails (SimulatedFailure)."
    )
    kv_capacity_tokens: int | None = Field(
        None,
        ge=1,
        description="KV memory: a request whose tokens would overflow it "
        "among those in flight fails with CudaOOM (simulates batches too big to fit).",
    )
    profiler: Literal["records", "absent", "hangs"] = Field(
        "records",
        description="The simulated server's profiler: starts and stops at once (records), "
        "has none (absent: its start is refused), or never answers its stop (hangs).",
    )


class NoopSpec(Spec):
    """Answers every request at once with all its tokens: measures the harness alone."""

    kind: Literal["noop"] = "noop"
    workers_refused: ClassVar[str | None] = None
    start_timeout: PositiveDuration = Field(
        as_written("10s"), description="Longest the backend may take to start."
    )


MAX_BODY_DEPTH = 32  # of extra_body's nesting: no API's request nests deeper


def _not_json(value: object, where: str, depth: int) -> str | None:
    """Why ``value`` is not strict JSON (a non-finite number, too deep), naming where; None."""
    import math

    if depth > MAX_BODY_DEPTH:
        return f"{where or 'it'}: nested deeper than {MAX_BODY_DEPTH}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where}: {value!r} is not a JSON number"
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        problem = _not_json(item, f"{where}.{key}" if where else str(key), depth + 1)
        if problem:
            return problem
    return None


class OpenAISpec(Spec):
    """A served model behind an OpenAI-compatible HTTP API (vLLM, SGLang, TGI, llama.cpp,
    ``transformers serve``), streamed over server-sent events."""

    kind: Literal["openai"] = "openai"
    workers_refused: ClassVar[str | None] = None
    start_timeout: PositiveDuration = Field(
        as_written("60s"),
        description="Longest the start-up probe (a 2-token request) may take: a server that "
        "accepts connections and never answers fails the run within this.",
    )
    read_timeout: PositiveDuration = Field(
        as_written("60s"),
        description="Longest silence between two reads of a response: that request fails "
        "with read_timeout (a server that stops answering altogether ends the run: "
        "load.stall_timeout).",
    )
    base_url: str = Field(description="The API root, e.g. http://127.0.0.1:8000/v1.")

    @field_validator("base_url")
    @classmethod
    def _an_http_url(cls, v: str) -> str:
        problem = url_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    endpoints: list[str] = Field(
        default_factory=list,
        description="More API roots serving the same model (replicas or gateways with no load "
        "balancer in front): the requests are spread over base_url and these by routing; "
        "each one's counts, latencies and server metrics are reported apart.",
    )
    routing: Literal["round_robin", "least_outstanding"] = Field(
        "round_robin",
        description="How requests are spread over several endpoints: in turn, or to the one "
        "with the fewest requests in flight (ties in turn).",
    )

    @field_validator("endpoints")
    @classmethod
    def _http_urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            problem = url_problem(url)
            if problem:
                raise ValueError(problem)
        return urls

    def base_urls(self) -> list[str]:
        """Every API root the requests go to: base_url first."""
        return [self.base_url, *self.endpoints]

    model: str = Field(description="The model name the server expects in each request.")
    api: Literal["chat", "completions", "responses", "embeddings", "rerank"] = Field(
        "chat",
        description="/chat/completions (messages), /completions (prompt), /responses (the "
        "Responses API, streamed), /embeddings (workload.inputs_per_request texts a request) "
        "or /rerank (a query and workload.documents documents; vLLM, Jina, Cohere shape).",
    )
    stream: bool = Field(
        True,
        description="Stream the answer (chat, completions, responses). false: one JSON answer "
        "a request, as a gateway or batch client that does not stream gets it: its end-to-end "
        "latency and tokens are measured, no TTFT or inter-token latency is claimed.",
    )
    tokenizer: str | None = Field(
        None,
        description="Local tokenizer directory or cached hub id, for prompt lengths and "
        "counting tokens in chunks (default: try `model`; else one token per chunk).",
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        description="Environment variable holding the API key (never written out).",
    )
    fixed_output: Literal["auto", "ignore_eos", "generation_config", "none"] = Field(
        "auto",
        description="How fixed output lengths are asked for: ignore_eos + min_tokens (vLLM, SGLang), "
        "generation_config (transformers serve), none; auto probes the server at start.",
    )
    extra_body: dict = Field(
        default_factory=dict, description="Merged into every request body (temperature, ...)."
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Extra HTTP headers. Values of sensitive names (authorization, cookie, "
        "anything with key, token, secret, ...) are masked in results and scrubbed from all "
        "output; prefer api_key_env for the API key.",
    )
    request_id_header: str = Field(
        "X-Request-Id",
        pattern=r"^([!#$%&'*+.^_`|~0-9A-Za-z-]+)?$",
        description="Header carrying each request's correlation id (32 hex digits; with "
        "outputs.otel, its trace id), kept as requests.jsonl's request_id; vLLM makes it its "
        "own request id. Empty: none sent.",
    )
    max_connections: int = Field(
        0,
        ge=0,
        description="Connection pool cap; 0: a new connection whenever none is idle, "
        "so the pool never makes a request wait (a waiting request is client lag).",
    )
    connect_timeout: Duration = Field(
        as_written("10s"), description="TCP + TLS connect timeout per request."
    )
    verify_tls: bool = Field(True, description="Verify the server's TLS certificate.")
    ca_bundle: str | None = Field(
        None,
        description="CA file to verify the server against (default: the system's, or "
        "SSL_CERT_FILE's).",
    )
    client_cert: str | None = Field(
        None,
        description="Client certificate (PEM) for a server that asks for one (mutual TLS); "
        "its key in the same file or in client_key.",
    )
    client_key: str | None = Field(None, description="The client certificate's key (PEM).")
    client_key_password_env: str | None = Field(
        None,
        description="Environment variable holding the client key's password (never written out).",
    )
    proxy: str = Field(
        "env",
        description="env: HTTP_PROXY, HTTPS_PROXY and NO_PROXY, as Python reads them; none: "
        "straight to the server; or a proxy's URL (http://[user:pw@]host:port), which wins. "
        "https goes through it in a CONNECT tunnel. Every call takes the same way: requests, "
        "discovery, /metrics, the DCGM exporter, the profiler.",
    )

    @field_validator("proxy")
    @classmethod
    def _a_proxy(cls, v: str) -> str:
        if v in ("env", "none"):
            return v
        v = v if "://" in v else f"http://{v}"  # host:port, as curl takes it
        try:
            proxy_endpoint(v)
        except ValueError as exc:
            raise ValueError(f"{secrets.redact_url(v)!r}: {exc}") from None
        return v

    fail_after_connect_errors: int = Field(
        10,
        ge=1,
        description="This many failed connections in a row, none "
        "succeeding: the server is down; the run ends (status failed).",
    )

    @field_validator("headers", "extra_body")
    @classmethod
    def _no_masked_secret(cls, mapping: dict) -> dict:
        """A value written as ``***`` is a secret a saved scenario held back: sending the mask
        would fail every request as the server's auth error, far from its cause."""
        masked = secrets.masked_names(mapping)
        if masked:
            raise ValueError(
                f"{', '.join(masked)}: {secrets.MASK} is a secret held back when the scenario "
                "was saved; give its value again (--set, or api_key_env for the API key)"
            )
        return mapping

    @field_validator("extra_body")
    @classmethod
    def _strict_json(cls, body: dict) -> dict:
        """What is merged into every request must be JSON as servers read it: no NaN or
        infinity (Python would send the non-JSON ``Infinity``), and no nesting past a depth any
        API has."""
        problem = _not_json(body, "", 0)
        if problem:
            raise ValueError(problem)
        return body

    def secret_values(self) -> list[str]:
        """Every secret this spec holds (API key, URL credentials, sensitive header values)."""
        return [
            os.environ.get(self.api_key_env) or "",
            *(v for url in self.base_urls() for v in secrets.url_credentials(url)),
            *secrets.url_credentials(self.proxy),
            os.environ.get(self.client_key_password_env or "") or "",
            *secrets.sensitive_values(dict(self.headers)),
            *secrets.sensitive_values(self.extra_body),
        ]

    def served_at(self) -> str | None:
        return self.base_url

    def redact(self, dumped: dict) -> dict:
        """A copy of this spec's dump with every secret masked (what metrics.json keeps)."""
        out = dict(dumped)
        out["base_url"] = secrets.redact_url(out["base_url"])
        out["endpoints"] = [secrets.redact_url(u) for u in out.get("endpoints") or []]
        if "proxy" in out:
            out["proxy"] = secrets.redact_url(out["proxy"])
        out["headers"] = secrets.redact_mapping(out.get("headers") or {})
        out["extra_body"] = secrets.redact_mapping(out.get("extra_body") or {})
        return out

    def preflight(self, base_dir: Path) -> list[Problem]:
        """Problems found before connecting: a CA bundle that is not there."""
        problems: list[Problem] = []
        for name in ("ca_bundle", "client_cert", "client_key"):
            value = getattr(self, name)
            if value is not None:
                p = Path(value).expanduser()
                if not (p if p.is_absolute() else base_dir / p).is_file():
                    problems.append((("backend", name), f"file not found: {p}"))
        if self.client_key is not None and self.client_cert is None:
            problems.append((("backend", "client_key"), "a key with no client_cert"))
        env = self.client_key_password_env
        if env is not None and env not in os.environ:
            problems.append(
                (("backend", "client_key_password_env"), f"${env} is not set in the environment")
            )
        return problems


BackendSpec = Annotated[
    SimSpec | NoopSpec | TransformersSpec | OpenAISpec, Field(discriminator="kind")
]


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a served model's API root (an http(s) URL with a host, or a Unix
    socket's), or None: checked before anything is asked of it, so no other scheme
    (``file://``) is ever opened."""
    try:
        Endpoint.parse(url)
    except ValueError as exc:
        return f"{secrets.redact_url(url)!r}: {exc}"
    return None
