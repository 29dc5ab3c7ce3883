"""The networks users run on, with real components (tests/real_servers.py): a forward proxy
(Debian's tinyproxy), a vLLM over https only with a private CA and required client
certificates, and a vLLM on a Unix socket. Every call of a run takes the same way: the
requests, discovery (``--url``), ``/tokenize``, ``/models`` and ``/metrics``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LENIENT, write_scenario

ROOT = Path(__file__).resolve().parents[2]
NO_PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")


def loadtest(*args: str, env: dict | None = None, timeout: float = 300):
    clean = {k: v for k, v in os.environ.items() if k.upper() not in NO_PROXY_ENV}
    return subprocess.run(
        [sys.executable, "-m", "loadtest", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, env={**clean, **(env or {})},
    )  # fmt: skip


def metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


@pytest.fixture
def dcgm_exporter():
    """A DCGM exporter's page on 127.0.0.2 (another origin than the server's), recording the
    headers each read came with."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[dict] = []

    class Exporter(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(dict(self.headers))
            body = b'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",modelName="H100"} 87\n'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.2", 0), Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.2:{server.server_address[1]}/metrics", seen
    server.shutdown()


def test_a_proxy_from_the_environment_carries_every_call_and_no_proxy_bypasses_it(
    vllm_server, forward_proxy, dcgm_exporter, tmp_path
):
    """``HTTP_PROXY``: the streamed requests (absolute-form, through tinyproxy), the server's
    ``/metrics`` and the DCGM exporter's go through the proxy, and the result says a proxy
    stood between; the API key goes to the server alone. ``NO_PROXY`` naming the hosts:
    nothing does."""
    dcgm, exporter_saw = dcgm_exporter
    path = write_scenario(
        tmp_path,
        {
            "name": "proxied",
            "backend": {"kind": "openai", "base_url": vllm_server.url, "model": "tiny"},
            "workload": {"input_tokens": 16, "output_tokens": 8},
            "load": {"arrival": {"kind": "concurrency", "users": 2}, "requests": 8,
                     "warmup": "0s", "validity": LENIENT},
            "telemetry": {"server_interval": "0.5s", "dcgm": dcgm},
        },
    )  # fmt: skip
    host = vllm_server.url.removesuffix("/v1")
    before = len(forward_proxy.requests())
    r = loadtest(
        "run", path, "-o", tmp_path / "via", "-q",
        env={"HTTP_PROXY": forward_proxy.url, "OPENAI_API_KEY": "sk-for-the-server-alone"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    m = metrics(tmp_path / "via")
    # a request written as the proxy closed its kept-alive connection is never sent again (it
    # may have gone on to the server): a failure, at most one a user before the client learns
    # how soon the proxy closes idle connections and stops reusing them that late
    req = m["requests"]
    assert req["completed"] + req["failed"] == 8 and req["failed"] <= 2, req
    assert set(req["errors_by_type"]) <= {"server_disconnected", "connection_reset"}, req
    assert m["backend"]["proxy"] == forward_proxy.url
    assert m["server"]["available"] is True and m["server"]["samples"] >= 1
    seen = forward_proxy.requests()[before:]
    posts = [x for x in seen if x.startswith(f"POST {host}/v1/chat/completions ")]
    # the probe, then the requests answered (``/tokenize`` too, where prompts are sized by it)
    assert len(posts) >= 1 + req["completed"], seen
    assert any(x.startswith(f"GET {host}/metrics ") for x in seen), seen
    assert any(x.startswith(f"GET {dcgm} ") for x in seen), seen
    assert m["gpu"]["available"] is True and m["gpu"]["source"] == f"DCGM exporter {dcgm}"
    assert exporter_saw and not any("Authorization" in h for h in exporter_saw)

    before = len(forward_proxy.requests())
    r = loadtest(
        "run", path, "-o", tmp_path / "direct", "-q",
        env={"HTTP_PROXY": forward_proxy.url, "NO_PROXY": "127.0.0.1,127.0.0.2"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert metrics(tmp_path / "direct")["backend"]["proxy"] == "none"
    assert forward_proxy.requests()[before:] == []


def test_a_url_run_behind_a_proxy_with_a_private_ca_and_a_client_certificate(
    vllm_more, forward_proxy, tmp_path
):
    """The user of the issue: ``HTTPS_PROXY`` set, a server with a private CA that requires a
    client certificate. ``--url`` finds the model, the run streams through a CONNECT tunnel,
    and the server's ``/metrics`` are read the same way (its client certificate too)."""
    server = vllm_more["spec"]
    before = len(forward_proxy.requests())
    out = tmp_path / "run"
    r = loadtest(
        "run", "--url", server.url, "--concurrency", "2", "--requests", "6",
        "--input-tokens", "16", "--output-tokens", "8", *sum((["--set", s] for s in server.client_sets()), []),
        "--set", "telemetry.server_interval=0.5s", "--set", f"load.validity={json.dumps(LENIENT)}",
        "-o", out, env={"HTTPS_PROXY": forward_proxy.url},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "model: tiny" in r.stderr
    m = metrics(out)
    assert m["requests"]["completed"] == 6 and m["requests"]["failed"] == 0
    details = m["backend"]
    assert details["proxy"] == forward_proxy.url and details["client_certificate"] is True
    assert m["server"]["available"] is True, m["server"]
    assert m["server"]["metrics"]["generation_tokens"]["run_change"] >= 6 * 8
    authority = server.url.removeprefix("https://").removesuffix("/v1")
    # the server's calls tunnelled (the tokenizer library's own hub lookup goes its own way)
    tunnels = [x for x in forward_proxy.requests()[before:] if x.startswith("CONNECT 127.")]
    assert len(tunnels) >= 2 and all(x.startswith(f"CONNECT {authority} ") for x in tunnels)


@pytest.mark.parametrize(
    "given, cause",
    [
        ({}, "signed by a CA this client does not trust"),
        # uvicorn (vLLM's server) sends no TLS alert: the drop right after the handshake is
        # named with its likely cause
        ({"ca_bundle": "ca"}, "does it require a client certificate? (client_cert, client_key)"),
        ({"ca_bundle": "ca", "client_cert": "stranger"},
         "does it refuse this client certificate"),
        ({"verify_tls": "false", "client_cert": "client", "client_key": "key"}, None),
    ],
    ids=["unknown-ca", "no-client-cert", "stranger-client-cert", "unverified-with-cert"],
)  # fmt: skip
def test_a_tls_failure_names_its_cause(vllm_more, tmp_path, given, cause):
    """What the user must change, said at once (exit 4), not "the server closed the
    connection"; ``verify_tls: false`` with a client certificate gets through."""
    server = vllm_more["spec"]
    tls = server.tls
    files = {"ca": tls.ca, "stranger": tls.stranger_cert, "client": tls.client_cert,
             "key": tls.client_key}  # fmt: skip
    sets = [f"backend.{k}={files.get(v, v)}" for k, v in given.items()]
    r = loadtest(
        "run", "--url", server.url, "--requests", "1", "--input-tokens", "8",
        "--output-tokens", "2", *sum((["--set", s] for s in sets), []),
        "--set", "telemetry.server=false", "-o", tmp_path / "run", timeout=120,
    )  # fmt: skip
    if cause is None:
        assert r.returncode == 0, r.stderr[-3000:]
    else:
        assert r.returncode == 4, r.stderr[-3000:]
        assert cause in r.stderr, r.stderr[-3000:]
        # the cause first; what the wire showed ("the server closed the connection") after it
        closed = r.stderr.find("closed the connection")
        assert closed == -1 or r.stderr.index(cause) < closed


def test_a_unix_socket_server_is_run_and_its_metrics_read(vllm_more, tmp_path):
    """``vllm serve --uds``: the requests and ``/metrics`` over the socket."""
    server = vllm_more["embed"]
    assert server.url.startswith("unix://")
    out = tmp_path / "run"
    r = loadtest(
        "run", ROOT / "scenarios" / "served-embeddings.yml", "-o", out, "-q",
        "--set", f"backend.base_url={server.url}", "--set", "backend.model=tiny",
        "--set", "load.arrival.rate=4", "--set", "load.duration=2s", "--set", "load.warmup=0s",
        "--set", "workload.input_tokens=16", "--set", "telemetry.server_interval=0.5s",
        "--set", f"load.validity={json.dumps(LENIENT)}", "--set", "sla=null",
        "--set", "goodput=null",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    m = metrics(out)
    assert m["requests"]["completed"] >= 4 and m["requests"]["failed"] == 0
    assert m["server"]["available"] is True, m["server"]
    assert m["server"]["source"] == server.url.removesuffix("/v1") + "/metrics"
    # vLLM counts every request's prompt: 8 texts of 16 tokens, [CLS] and [SEP] included
    assert m["server"]["metrics"]["prompt_tokens"]["run_change"] >= 8 * 16 * 4


def test_two_servers_as_two_endpoints_of_one_run(vllm_server, vllm_more, tmp_path):
    """Two vLLMs serving the same model (one over http, one over https with a client
    certificate), round robin: each gets half the requests, and each one's counts, latencies
    and server metrics are reported apart."""
    other = vllm_more["spec"]
    path = write_scenario(
        tmp_path,
        {
            "name": "two",
            "backend": {"kind": "openai", "base_url": vllm_server.url, "model": "tiny",
                        "endpoints": [other.url], "routing": "round_robin",
                        **{k: str(v) for k, v in other.client.items()}},
            "workload": {"input_tokens": 16, "output_tokens": 8},
            "load": {"arrival": {"kind": "concurrency", "users": 2}, "requests": 8,
                     "warmup": "0s", "validity": LENIENT},
            "telemetry": {"server_interval": "0.5s", "gpu": False},
        },
    )  # fmt: skip
    r = loadtest("run", path, "-o", tmp_path / "run", "-q")
    assert r.returncode == 0, r.stderr[-3000:]
    m = metrics(tmp_path / "run")
    assert m["requests"]["completed"] == 8 and m["requests"]["failed"] == 0
    shares = m["traffic"]["endpoints"]
    assert set(shares) == {vllm_server.url, other.url}
    assert [s["completed"] for s in shares.values()] == [4, 4]
    assert all(s["latency_ms"]["e2e"]["count"] == 4 for s in shares.values())
    servers = m["server"]["endpoints"]
    assert set(servers) == {vllm_server.url, other.url}
    assert all(s["available"] for s in servers.values()), servers
    assert f"endpoint {other.url}" in (tmp_path / "run" / "report.md").read_text()
