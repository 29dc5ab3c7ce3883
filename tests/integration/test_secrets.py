"""Secrets through every channel: a URL's password and the API key never reach stdout (--json
included), stderr, the run directory, a saved scenario or a temp file; credentials never follow
a redirect to another origin; URL credentials and an API key together run."""

from __future__ import annotations

import glob
import http.server
import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")

ROOT = Path(__file__).resolve().parents[2]
PASSWORD, KEY, HEADER = "pw-s3cret-5678", "sk-verysecret-1234", "hdr-secret-9012"
PROXY_PW, OTHER_PW = "proxy-s3cret-3456", "other-s3cret-7890"  # a proxy's, another endpoint's


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@pytest.fixture
def fast_server():
    from tests.real_servers import start_fast_server

    server = start_fast_server()
    yield int(server.url.rsplit(":", 1)[1].split("/")[0])
    server.kill()


def test_url_credentials_and_a_key_run_and_are_never_shown_or_stored(
    fast_server, forward_proxy, tmp_path
):
    """Every channel a secret comes by (a URL's login, a second endpoint's, the API key, a
    header, the proxy's login) through every writer (stdout, stderr, the run directory with its
    scenario copy, --save-scenario, temp files)."""
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "loadtest-*")))
    proxy = forward_proxy.url.replace("http://", f"http://me:{PROXY_PW}@")
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    saved = tmp_path / "saved.yml"
    r = subprocess.run(
        [
            sys.executable, "-m", "loadtest", "run",
            "--url", f"http://user:{PASSWORD}@127.0.0.1:{fast_server}/v1",
            "--url", f"http://other:{OTHER_PW}@localhost:{fast_server}/v1",
            "--set", f"backend.proxy={proxy}",
            "--requests", "3", "--json", "-o", str(tmp_path / "run"),
            "--save-scenario", str(saved),
            # the subject is the secrets, not the client's timing on a shared machine (the
            # stub's tokens come microseconds apart: a loop lag of 1 ms is 80x its TPOT)
            "--set", "load.validity.max_dispatch_lag_p99=2s",
            "--set", "load.validity.max_loop_lag_p99=2s",
            "--set", "load.validity.max_stamp_delay_share=1000",
            "--set", f"backend.headers={{X-Api-Key: {HEADER}, X-Trace: hello}}",
        ],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr  # the two together once crashed the HTTP client
    assert '"status": "ok"' in r.stdout
    created = set(glob.glob(os.path.join(tempfile.gettempdir(), "loadtest-*"))) - before
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    files += [saved] + [p for d in created for p in Path(d).rglob("*") if p.is_file()]
    for text in [r.stdout, r.stderr] + [p.read_text(errors="replace") for p in files]:
        for secret in (PASSWORD, KEY, HEADER, PROXY_PW, OTHER_PW):
            assert secret not in text
    assert "http://***@127.0.0.1" in saved.read_text() and "proxy: http://***@" in saved.read_text()
    # it ran that way: through the proxy, to both endpoints
    assert any(f"127.0.0.1:{fast_server}/v1/" in x for x in forward_proxy.requests())
    import json as _json

    shares = _json.loads((tmp_path / "run" / "metrics.json").read_text())["traffic"]["endpoints"]
    assert len(shares) == 2 and all(PASSWORD not in k and OTHER_PW not in k for k in shares)
    assert "http://***@127.0.0.1" in saved.read_text()
    # a secret header given with --set is saved masked; the file then refuses to run with the
    # mask in its place (it would fail every request as the server's auth error)
    import yaml

    headers = yaml.safe_load(saved.read_text())["backend"]["headers"]
    assert headers == {"X-Api-Key": "***", "X-Trace": "hello"}
    again = subprocess.run(
        [sys.executable, "-m", "loadtest", "validate", str(saved)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert again.returncode == 2
    assert "backend.headers: X-Api-Key: *** is a secret held back" in again.stderr


def test_a_url_runs_secret_headers_reach_the_run_but_not_the_file(tmp_path, monkeypatch):
    from loadtest.cli import from_url
    from loadtest.config.loading import load_scenario

    monkeypatch.setattr(sys, "argv", ["loadtest", "run", "--set", f"x={HEADER}"])
    data = {
        "name": "t",
        "backend": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m",
                    "headers": {"Authorization": f"Bearer {HEADER}", "X-Trace": "t"},
                    "extra_body": {"temperature": 0, "session_token": HEADER},
                    "proxy": f"http://me:{PASSWORD}@127.0.0.1:3128",
                    "endpoints": [f"http://you:{PASSWORD}@127.0.0.1:2/v1"]},
        "load": {"arrival": {"kind": "poisson", "rate": 1}, "requests": 1},
    }  # fmt: skip
    path, keep = from_url._written(data, "http://127.0.0.1:1/v1", tmp_path / "s.yml", False)
    assert HEADER not in path.read_text() and PASSWORD not in path.read_text()
    assert "proxy: http://***@127.0.0.1:3128" in path.read_text()
    backend = load_scenario(path, keep).scenario.backend
    assert backend.headers == {"Authorization": f"Bearer {HEADER}", "X-Trace": "t"}
    assert backend.extra_body == {"temperature": 0, "session_token": HEADER}
    assert backend.proxy == f"http://me:{PASSWORD}@127.0.0.1:3128"
    assert backend.endpoints == [f"http://you:{PASSWORD}@127.0.0.1:2/v1"]
    assert "- http://***@127.0.0.1:2/v1" in path.read_text()
    # what a result keeps of the spec: the proxy's login masked, and registered for scrubbing
    assert backend.redact(backend.model_dump())["proxy"] == "http://***@127.0.0.1:3128"
    assert PASSWORD in backend.secret_values()


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str | None] = []
    target = ""

    def do_GET(self):
        if self.target:
            self.send_response(301)
            self.send_header("Location", self.target + self.path)
            self.end_headers()
            return
        type(self).seen.append(self.headers.get("Authorization"))
        body = b'{"data": [{"id": "m"}]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _serve(handler, host: str) -> tuple[http.server.HTTPServer, str]:
    server = http.server.HTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}"


def test_credentials_never_follow_a_redirect_to_another_origin():
    """Discovery follows no redirect (as the requests do not): it says to point the URL there,
    and nothing, the key least of all, reaches the other origin."""
    from loadtest.backends.openai.discovery import list_models
    from loadtest.core.errors import BackendError

    other = type("Other", (_Recorder,), {"seen": [], "target": ""})
    elsewhere, elsewhere_url = _serve(other, "127.0.0.2")
    redirect = type("Redirect", (_Recorder,), {"seen": [], "target": elsewhere_url})
    origin, origin_url = _serve(redirect, "127.0.0.1")
    try:
        with pytest.raises(BackendError, match="HTTP 301, a redirect, not followed"):
            list_models(origin_url + "/v1", KEY)
        assert other.seen == []
    finally:
        origin.shutdown()
        elsewhere.shutdown()


def test_every_endpoints_credentials_are_masked_and_registered():
    from loadtest.config.backend_specs import OpenAISpec

    spec = OpenAISpec(
        base_url="http://a:8000/v1",
        model="m",
        endpoints=[f"http://u:{PASSWORD}@b:8000/v1", "unix:///run/v.sock:/v1"],
    )
    dumped = spec.redact(spec.model_dump())
    assert dumped["endpoints"] == ["http://***@b:8000/v1", "unix:///run/v.sock:/v1"]
    assert PASSWORD in spec.secret_values()
    with pytest.raises(ValueError, match="give an http://, https:// or unix:// URL"):
        OpenAISpec(base_url="http://a/v1", model="m", endpoints=["file:///etc/passwd"])


def test_one_server_given_twice_is_two_rows_by_place(fast_server, tmp_path):
    """Two endpoints whose URLs differ only in their logins: each its own row, the second
    named by its place, and neither login in the names."""
    url = f"127.0.0.1:{fast_server}/v1"
    r = subprocess.run(
        [
            sys.executable, "-m", "loadtest", "run",
            "--url", f"http://a:{PASSWORD}@{url}", "--url", f"http://b:{OTHER_PW}@{url}",
            "--requests", "4", "-q", "-o", str(tmp_path / "run"),
            "--set", "load.validity.max_dispatch_lag_p99=2s",
            "--set", "load.validity.max_loop_lag_p99=2s",
            "--set", "load.validity.max_stamp_delay_share=1000",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    import json as _json

    shares = _json.loads((tmp_path / "run" / "metrics.json").read_text())["traffic"]["endpoints"]
    assert shares.keys() == {f"http://{url}", f"http://{url} (endpoint 2)"}
    assert [s["completed"] for s in shares.values()] == [2, 2]


def test_one_of_two_endpoints_dying_ends_the_run_naming_it(tmp_path):
    """The other endpoint's answers do not hide a dead one: its connection failures in a row
    are counted apart, and the run ends as for a lone server, naming it, with what it
    measured before kept."""
    import json as _json
    import threading

    from tests.real_servers import start_fast_server

    alive, dying = start_fast_server(), start_fast_server()
    try:
        run = subprocess.Popen(
            [
                sys.executable, "-m", "loadtest", "run", "--url", alive.url, "--url", dying.url,
                "--rate", "20", "--duration", "60s", "-o", str(tmp_path / "run"),
                "--set", "load.validity.max_dispatch_lag_p99=2s", "--set", "load.warmup=0s",
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},  # no hub lookup for the stub's name
        )  # fmt: skip
        # killed once the run has measured traffic: its first progress line (5 s after t0),
        # however long discovery and the probes took on a busy machine
        lines: list[str] = []
        measuring = threading.Event()

        def read_stderr() -> None:
            assert run.stderr is not None
            for line in run.stderr:
                lines.append(line)
                if line.startswith("progress:"):
                    measuring.set()

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        assert measuring.wait(90), "".join(lines)[-2000:]
        dying.kill()
        run.wait(timeout=120)
        reader.join(10)
        err = "".join(lines)
    finally:
        alive.kill()
        dying.kill()
    assert run.returncode == 4, err[-2000:]
    m = _json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert f"{dying.url}: the server is down" in m["harness"]["failure"]
    shares = m["traffic"]["endpoints"]
    assert shares[alive.url]["completed"] > 0 and shares[alive.url]["failed"] == 0
    assert shares[dying.url]["completed"] > 0 and shares[dying.url]["failed"] >= 1
