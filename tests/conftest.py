"""Shared helpers: build a scenario from a dict and run it on the virtual clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from loadtest.config.loading import load_scenario
from loadtest.core.clock import run_virtual
from loadtest.session import run_scenario_async

# For real-clock tests whose subject is not the client's own timing: a CI machine shared with
# another process delays the event loop by tens of ms, which would (rightly) mark a run invalid.
# The harness's timing is tested on the virtual clock and in bench/; these tests assert their
# own property, with a margin a busy 2-core machine cannot break. That lag also holds token
# stamps: against a tiny model's few-ms TPOT it would (rightly) fail the stamp-delay judgement.
LENIENT = {"max_dispatch_lag_p99": "2s", "max_loop_lag_p99": "2s", "max_stamp_delay_share": 1000.0}

pytest_plugins = ["tests.stopping"]  # a SIGTERM stops the fixtures' servers too


def pytest_collection_modifyitems(config, items) -> None:
    """Everything under tests/integration is the integration tier; unit files mark their few
    process or real-clock tests themselves."""
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)


def start_run(path: Path, out: Path, stderr=None):
    """``loadtest run PATH --out OUT -q`` in a child process, for tests that signal or outlive
    it; stdout and stderr piped (``stderr=subprocess.STDOUT`` merges them)."""
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-m", "loadtest", "run", str(path), "--out", str(out), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr is None else stderr,
        text=True,
    )


# Simulated M/D/1 server: one slot, 10 ms a request (a 1-token prompt at 10 ms a token, no
# decode), so capacity is 100 req/s; the queueing tests' known answers assume it.
MD1_BACKEND = {
    "kind": "sim",
    "max_concurrency": 1,
    "prefill_ms_per_token": 10.0,
    "decode_ms_per_token": 0,
}


def write_scenario(tmp_path: Path, data: dict, name: str = "scenario.yml") -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def refused_backend_output(tmp_path: Path, backend: dict) -> str:
    """``loadtest validate`` of a dummy:tiny-llama scenario with these backend fields, which it
    must refuse as a usage error naming the file: its output."""
    from typer.testing import CliRunner

    from loadtest.cli import app
    from loadtest.core import exit_codes

    path = write_scenario(
        tmp_path,
        {
            "name": "refused",
            "backend": {"kind": "transformers", "model": "dummy:tiny-llama", **backend},
            "load": {"arrival": {"kind": "burst"}, "requests": 4},
        },
    )
    r = CliRunner().invoke(app, ["validate", str(path)])
    assert r.exit_code == exit_codes.USAGE and "scenario.yml:" in r.output, r.output
    return r.output


def run_virtual_scenario(tmp_path: Path, data: dict, overrides=()) -> dict:
    """Run on a virtual-time loop: exact timings, a simulated minute in well under a second."""
    loaded = load_scenario(write_scenario(tmp_path, data), list(overrides))
    result = run_virtual(lambda clock: run_scenario_async(loaded, tmp_path / "run", clock=clock))
    return result.metrics


@pytest.fixture
def run_virtual_fn(tmp_path):
    return lambda data, overrides=(): run_virtual_scenario(tmp_path, data, overrides)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny Llama + trained tokenizer saved with save_pretrained (see tests/tiny_model.py)."""
    pytest.importorskip("transformers")
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory) -> Path:
    """A tiny BERT + trained WordPiece tokenizer (see tests/tiny_model.py)."""
    pytest.importorskip("transformers")
    from tests.tiny_model import build_tiny_encoder

    return build_tiny_encoder(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """vLLM's interpreter (its own venv: ``python -m tests.real_servers install``). Outside CI
    a missing vLLM skips its tests; in CI (``CI=true``) it fails them: CI installs it."""
    import os

    from tests import real_servers

    python = real_servers.vllm_python()
    if python is None:
        how = f"vLLM is not installed in {real_servers.vllm_venv()}: python -m tests.real_servers install"
        if os.environ.get("CI"):
            pytest.fail(how)
        pytest.skip(how)
    return python


KEEP_ALIVE_S = 2  # the shared vLLM's idle-connection timeout


@pytest.fixture(scope="session")
def otlp_receiver():
    """An OTLP/HTTP receiver for the session (``tests/otlp_receiver.py``): the shared vLLM
    exports its request spans to it, and a traced run its own."""
    pytest.importorskip("opentelemetry.proto")
    from tests.otlp_receiver import OtlpReceiver

    receiver = OtlpReceiver()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="session")
def vllm_server(vllm_python, otlp_receiver, tmp_path_factory):
    """One vLLM for the session, serving the tiny model as ``tiny`` (and as ``tiny-b``: two
    served names for a model mix), its torch profiler on call (without Python stacks: vLLM's
    default stack tracing stalls its engine here), tool calls parsed (hermes), idle
    connections closed after 2 s (the client's reuse of a closed one is met in every test),
    and its request spans exported to ``otlp_receiver`` (``--otlp-traces-endpoint``)."""
    from tests import real_servers

    work = tmp_path_factory.mktemp("vllm")
    model = real_servers.build_vllm_model(work / "model")
    server = real_servers.start_vllm(
        vllm_python,
        model,
        work,
        {"torch_profiler_with_stack": False},
        *real_servers.TOOL_ARGS,
        also_as=("tiny-b",),
        keep_alive_s=KEEP_ALIVE_S,
        otlp=otlp_receiver.endpoint,
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def vllm_more(vllm_python, tmp_path_factory):
    """Four more vLLMs, started at once: tiny BERTs served with ``--runner pooling`` (an
    embedding model, and a one-label sequence classifier vLLM serves as a reranker), the
    tiny Llama with n-gram speculative decoding and DeepSeek-R1's reasoning parser (its
    tokenizer has ``<think>`` and ``</think>``), and the tiny Llama with vLLM's default
    profiler (Python stacks: its stop may stall the engine, so one test has it to itself); as
    ``{"embed", "rerank", "spec", "stacks"}``. The networks users run them on are spread over
    them: the speculative one over https only, a client certificate from its private CA
    required (``server.tls``); the embedding model on a Unix socket."""
    from concurrent.futures import ThreadPoolExecutor

    from tests import real_servers

    launches = {}
    for kind in ("embed", "rerank", "spec", "stacks"):  # built here: lazy imports race
        work = tmp_path_factory.mktemp(f"vllm-{kind}")
        if kind == "stacks":
            model, extra = real_servers.build_vllm_model(work / "model"), ()
        elif kind == "spec":  # and a reasoning parser: thinking models draft too
            model = real_servers.build_vllm_model(work / "model", think_tokens=True)
            extra: tuple = (
                "--speculative-config", json.dumps(real_servers.NGRAM_SPEC),
                "--reasoning-parser", "deepseek_r1",
            )  # fmt: skip
        else:
            model = real_servers.build_vllm_encoder(work / "model", kind == "rerank")
            extra = ("--runner", "pooling")
        launches[kind] = (model, work, extra)

    def start(kind: str):
        model, work, extra = launches[kind]
        profiler = {} if kind == "stacks" else None  # {}: vLLM's defaults
        tls = real_servers.Tls.make(work / "tls") if kind == "spec" else None
        uds = work / "vllm.sock" if kind == "embed" else None
        return real_servers.start_vllm(vllm_python, model, work, profiler, *extra, tls=tls, uds=uds)

    with ThreadPoolExecutor(len(launches)) as pool:
        futures = {kind: pool.submit(start, kind) for kind in launches}
        servers = {}
        try:
            for kind, future in futures.items():
                servers[kind] = future.result()
        finally:
            if len(servers) < len(futures):  # one failed to start: stop the others first
                for future in futures.values():
                    if future.exception() is None:
                        future.result().stop()
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="session")
def forward_proxy(tmp_path_factory):
    """A forward proxy (Debian's tinyproxy) on loopback for the session. Outside CI a missing
    tinyproxy skips its tests; in CI it fails them: CI installs it (``.ci/run``)."""
    import os
    import shutil

    from tests import real_servers

    if shutil.which("tinyproxy") is None and not os.path.exists("/usr/bin/tinyproxy"):
        how = "no tinyproxy: apt-get install tinyproxy"
        if os.environ.get("CI"):
            pytest.fail(how)
        pytest.skip(how)
    proxy = real_servers.start_tinyproxy(tmp_path_factory.mktemp("proxy"))
    yield proxy
    proxy.stop()
