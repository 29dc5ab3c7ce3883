"""Nothing lost, no hang, no leak: each class of defect, with a case that would have caught it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from loadtest.cli import app
from loadtest.core import exit_codes, secrets
from loadtest.core.clock import run_virtual
from loadtest.core.errors import ScenarioError
from loadtest.core.histogram import LatencyHistogram
from loadtest.execution.rate_ceiling import RateCeiling
from tests.conftest import LENIENT, start_run, write_scenario

SIM_LOAD = {"arrival": {"kind": "constant", "rate": 20}, "duration": "30s", "validity": LENIENT}


def cli(*args, timeout=60, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "loadtest", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


class SilentServer:
    """Accepts TCP connections and never answers (reads and drops what it gets)."""

    def __init__(self, reply: bytes | None = None) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.conns: list[socket.socket] = []
        self.seen = b""
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            conn.settimeout(2)
            try:
                self.seen += conn.recv(65536)
            except OSError:
                pass
            if self.reply is not None:
                conn.sendall(self.reply(self.seen) if callable(self.reply) else self.reply)
                conn.close()

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def openai_scenario(tmp_path: Path, port: int, **backend) -> Path:
    return write_scenario(
        tmp_path,
        {
            "name": "served",
            "backend": {
                "kind": "openai",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "model": "m",
                "tokenizer": None,
                **backend,
            },
            "workload": {"input_tokens": 8, "output_tokens": 4},
            "load": {"arrival": {"kind": "constant", "rate": 2}, "duration": "2s"},
            "telemetry": {"gpu": False},
        },
    )


# --- 1. every wait is bounded ---------------------------------------------------------------


def test_a_server_that_never_answers_fails_the_start_with_everything_written(tmp_path):
    server = SilentServer()
    try:
        path = openai_scenario(tmp_path, server.port, start_timeout="1s")
        t = time.monotonic()
        r = cli("run", path, "--out", tmp_path / "run", "-q")
        assert time.monotonic() - t < 30
    finally:
        server.close()
    assert r.returncode == exit_codes.FAILED, r.stderr
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["status"] == "failed" and m["validity"]["valid"] is False
    assert "start_timeout" in m["validity"]["reasons"][0]
    assert m["requests"]["sent"] == 0 and m["requests"]["never_sent"] == 4  # 2/s for 2 s
    assert "start_timeout" in r.stderr + r.stdout


def test_silence_mid_run_ends_it_as_failed_with_what_was_measured(tmp_path):
    data = {
        "name": "stall",
        "backend": {
            "kind": "sim",
            "max_concurrency": 4,
            "decode_ms_per_token": 1,
            "stalls": [{"at": "3s", "for": "10m"}],
        },
        "workload": {"input_tokens": 10, "output_tokens": 10},
        "load": {**SIM_LOAD, "stall_timeout": "5s"},
        "telemetry": {"gpu": False},
    }
    from loadtest.config.loading import load_scenario
    from loadtest.session import run_scenario_async

    loaded = load_scenario(write_scenario(tmp_path, data))
    m = run_virtual(lambda c: run_scenario_async(loaded, tmp_path / "run", clock=c)).metrics
    assert m["status"] == "failed"
    assert "stopped answering" in m["harness"]["failure"]
    assert 55 <= m["requests"]["completed"] <= 61  # 20/s for ~3 s before the stall
    assert m["requests"]["never_sent"] > 400  # the rest of the 30 s plan
    # rates divide by the span measured (stall at 3 s + 5 s of silence), not the planned 30 s
    assert 7.5 <= m["window"]["length_s"] <= 8.5
    assert m["throughput"]["requests_per_s"] == pytest.approx(
        m["requests"]["completed"] / m["window"]["length_s"], rel=0.05
    )


# --- 2. signals -----------------------------------------------------------------------------


def long_sim_scenario(tmp_path: Path) -> Path:
    """A simulated run of 30 s at 20 req/s: long enough to be signalled mid-way."""
    return write_scenario(
        tmp_path,
        {
            "name": "long",
            "load": SIM_LOAD,
            "telemetry": {"gpu": False},
            "backend": {"kind": "sim", "max_concurrency": 8, "decode_ms_per_token": 1},
            "workload": {"input_tokens": 8, "output_tokens": 8},
        },
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_writes_the_partial_result_and_exits_by_convention(tmp_path, sig):
    proc = start_run(long_sim_scenario(tmp_path), tmp_path / "run")
    time.sleep(4)  # loads, then runs: well inside the 30 s window
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, err
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["status"] == "interrupted" and m["interrupted_by"] == signal.Signals(sig).name
    window = m["window"]["length_s"]
    assert 0 < window < 25  # the measured span, not the planned 30 s
    assert m["throughput"]["requests_per_s"] == pytest.approx(20, rel=0.3)


def test_two_sigterms_in_a_row_still_write_the_partial_result(tmp_path):
    """coreutils `timeout` sends SIGTERM to the process and to its group: two at once. The
    second changes nothing; the partial result is written (it was lost before)."""
    proc = start_run(long_sim_scenario(tmp_path), tmp_path / "run")
    time.sleep(4)
    for _ in range(3):  # apart enough for each to be delivered (pending ones merge)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.05)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err  # killed by the second, it was -15 with no result
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["status"] == "interrupted" and m["requests"]["completed"] > 0


def test_sigterm_ends_a_run_stuck_on_a_silent_server_within_seconds(tmp_path):
    server = SilentServer()
    try:
        path = openai_scenario(tmp_path, server.port, start_timeout="10m")
        proc = start_run(path, tmp_path / "run")
        time.sleep(3)
        t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        assert time.monotonic() - t < 20
    finally:
        server.close()
    assert proc.returncode == 143
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["status"] == "interrupted" and "SIGTERM" in m["validity"]["reasons"][0]


# --- 3. results are never lost or mixed ----------------------------------------------------


def sim_scenario(tmp_path: Path, name="quick") -> Path:
    return write_scenario(
        tmp_path,
        {
            "name": name,
            "telemetry": {"gpu": False},
            "workload": {"input_tokens": 8, "output_tokens": 4},  # a run of half a second
            "load": {
                "arrival": {"kind": "constant", "rate": 50},
                "requests": 20,
                "validity": LENIENT,
            },
        },
    )


def test_a_second_run_never_replaces_or_mixes_with_the_first(tmp_path):
    path, out = sim_scenario(tmp_path), tmp_path / "run"
    assert cli("run", path, "--out", out, "-q").returncode == 0
    first = (out / "metrics.json").read_text()
    r = cli("run", path, "--out", out, "-q")
    assert r.returncode == exit_codes.USAGE and "--overwrite" in r.stderr
    assert (out / "metrics.json").read_text() == first
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    r = cli("run", path, "--out", tmp_path / "other", "-q", "--overwrite")
    assert r.returncode == exit_codes.USAGE and (tmp_path / "other" / "notes.txt").exists()
    assert cli("run", path, "--out", out, "-q", "--overwrite").returncode == 0


def test_default_directories_are_unique_safe_and_honour_the_umask(tmp_path):
    path = write_scenario(
        tmp_path,
        {
            "name": "../../evil/[/]name",
            "telemetry": {"gpu": False},
            "load": {"arrival": {"kind": "burst"}, "requests": 2},
        },
    )
    work = tmp_path / "work"
    work.mkdir()
    runs = [cli("run", path, "-q", cwd=work) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr
    dirs = sorted((work / "reports").iterdir())
    assert len(dirs) == 2 and all(d.name.startswith("evil-name-") for d in dirs)
    assert not (tmp_path / "evil").exists()
    mode = (dirs[0] / "metrics.json").stat().st_mode & 0o777
    assert mode == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("out", ["/proc/nope/run", "a" * 300, "bad\0name"])
def test_an_unusable_output_directory_is_refused_before_anything_runs(tmp_path, out):
    r = CliRunner().invoke(app, ["run", str(sim_scenario(tmp_path)), "--out", out, "-q"])
    assert r.exit_code == exit_codes.USAGE
    assert "cannot create the output directory" in r.output or "null byte" in r.output


# --- 4. bad input is refused up front ------------------------------------------------------

BAD = {
    "duplicate key": "name: a\nname: b\nload: {arrival: {kind: burst}, requests: 1}\n",
    "infinite rate": "name: a\nload: {arrival: {kind: poisson, rate: .inf}, duration: 1s}\n",
    "nan cv": "name: a\nload: {arrival: {kind: gamma, rate: 1, cv: .nan}, duration: 1s}\n",
    "absurd rate": "name: a\nload: {arrival: {kind: poisson, rate: 2e5}, duration: 1h}\n",
    "absurd users": "name: a\nload: {arrival: {kind: concurrency, users: 100000000}, requests: 1}\n",
    "zero duration": "name: a\nload: {arrival: {kind: poisson, rate: 1}, duration: 0}\n",
    "zero interval": "name: a\noutputs: {interval: 0}\nload: {arrival: {kind: burst}, requests: 1}\n",
    "empty window": "name: a\nload: {arrival: {kind: constant, rate: 0.01}, duration: 1s, warmup: 1s}\n",
    "bomb in extra_body": "name: a\nx: &x [1,1,1,1,1,1,1,1,1,1]\n"
    + "".join(
        f"x{i}: &x{i} [{','.join(['*x' + (str(i - 1) if i > 1 else '')] * 10)}]\n"
        for i in range(1, 7)
    )
    + "load: {arrival: {kind: burst}, requests: 1}\n",
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_scenarios_exit_2_with_file_and_line(tmp_path, case):
    path = tmp_path / "s.yml"
    path.write_text(BAD[case])
    r = CliRunner().invoke(app, ["validate", str(path)])
    assert r.exit_code == exit_codes.USAGE, r.output
    assert "s.yml:" in r.output and r.exception is None or isinstance(r.exception, SystemExit)


def test_binary_large_and_non_utf8_files_are_refused(tmp_path):
    for name, raw in {
        "bin.yml": b"name: a\0",
        "latin.yml": "name: caf\xe9".encode("latin-1"),
        "big.yml": b"# " + b"x" * (5 << 20),
    }.items():
        (tmp_path / name).write_bytes(raw)
        r = CliRunner().invoke(app, ["validate", str(tmp_path / name)])
        assert r.exit_code == exit_codes.USAGE and f"{name}:" in r.output


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(max_size=300), override=st.text(max_size=60))
def test_garbage_never_gives_a_traceback(tmp_path, text, override):
    path = tmp_path / "g.yml"
    path.write_text(
        "name: g\nload: {arrival: {kind: burst}, requests: 1}\n" + text, encoding="utf-8"
    )
    for args in (["validate", str(path)], ["validate", str(path), "--set", override]):
        r = CliRunner().invoke(app, args)
        assert r.exit_code in (0, 2), (args, r.output, r.exception)
        assert r.exception is None or isinstance(r.exception, SystemExit), r.exception


# --- 5. secrets stay secret; outside text stays text ---------------------------------------


def test_an_echoing_server_never_gets_the_key_into_results_or_output(tmp_path):
    def echo(seen: bytes) -> bytes:
        body = b"denied; you sent: " + seen
        return b"HTTP/1.1 401 Unauthorized\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    server = SilentServer(reply=echo)
    key = "sk-verysecret-123456"
    try:
        path = openai_scenario(tmp_path, server.port, headers={"X-Api-Key": "hdr-secret-987"})
        r = cli("run", path, "--out", tmp_path / "run", "-q", env={"OPENAI_API_KEY": key})
    finally:
        server.close()
    assert key.encode() in server.seen  # it was sent
    assert r.returncode == exit_codes.FAILED
    stored = "".join(p.read_text() for p in (tmp_path / "run").iterdir() if p.is_file())
    for secret in (key, "hdr-secret-987"):
        assert secret not in stored and secret not in r.stdout + r.stderr
    assert "***" in stored


def test_markup_in_names_and_errors_is_shown_as_written(tmp_path):
    path = write_scenario(
        tmp_path,
        {
            "name": "[/][bold]x",
            "telemetry": {"gpu": False},
            # the subject is the name's markup, not the client's timing on a shared machine
            "load": {
                "arrival": {"kind": "burst"},
                "requests": 2,
                "validity": {
                    "max_dispatch_lag_p99": "2s",
                    "max_loop_lag_p99": "2s",
                    "max_stamp_delay_share": 1000,
                },
            },
        },
    )
    r = cli("run", path, "--out", tmp_path / "run", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[/][bold]x" in r.stdout


def test_the_scrubber_masks_longest_first():
    secrets.forget_all()
    secrets.register("abcd", "abcd-efgh", "ab")  # "ab" is too short to register
    assert secrets.scrub("x abcd-efgh ab abcd") == "x *** ab ***"
    assert secrets.is_sensitive_name(" X-API_Key ") and not secrets.is_sensitive_name("X-Trace")
    secrets.forget_all()


# --- 6. numbers that mislead ---------------------------------------------------------------


def test_an_empty_histogram_merged_in_does_not_make_the_minimum_zero():
    h = LatencyHistogram()
    h.record_us(5000)
    h.add(LatencyHistogram())
    assert h.summary_ms()["min"] == 5.0


def test_a_fractional_rate_ceiling_is_honoured_on_the_virtual_clock():
    async def go(clock):
        ceiling, sent = RateCeiling(0.5, clock), []
        t0 = clock.now_ns()
        for _ in range(4):
            await ceiling.acquire()
            sent.append((clock.now_ns() - t0) / 1e9)
        return sent

    assert run_virtual(go) == [0, 2, 4, 6]


def test_a_burst_ceiling_lets_a_second_of_sends_through_then_paces():
    async def go(clock):
        ceiling, sent = RateCeiling(4, clock), []
        t0 = clock.now_ns()
        for _ in range(6):
            await ceiling.acquire()
            sent.append((clock.now_ns() - t0) / 1e9)
        return sent

    assert run_virtual(go) == [0, 0, 0, 0, 0.25, 0.5]


def test_malformed_sse_is_a_bad_response(tmp_path):
    stream = b"data: 5\n\ndata: [DONE]\n\n"
    ok_probe = b'data: {"choices": [{"text": "hi", "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
    calls = {"n": 0}

    def reply(seen: bytes) -> bytes:
        if seen.rfind(b"GET ") > seen.rfind(b"POST "):  # /v1/models: where's the tokenizer
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
        calls["n"] += 1
        body = ok_probe if calls["n"] == 1 else stream
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body)
        )

    server = SilentServer(reply=reply)
    try:
        path = openai_scenario(tmp_path, server.port, api="completions", max_connections=0)
        r = cli("run", path, "--out", tmp_path / "run", "-q")
    finally:
        server.close()
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert set(m["requests"]["errors_by_type"]) == {"bad_response"}, (r.stderr, m["requests"])


def test_gate_on_a_malformed_result_is_a_usage_error(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"status": "ok", "histograms": {"ttft": "junk"}}))
    sla = tmp_path / "sla.yml"
    sla.write_text("ttft_p99: 1s\n")
    r = CliRunner().invoke(app, ["gate", str(run), "--sla", str(sla)])
    assert r.exit_code == exit_codes.USAGE and "not a loadtest metrics file" in r.output


def test_a_crash_is_an_internal_error_not_an_sla_failure(monkeypatch):
    import loadtest.cli as cli_module

    def boom():
        raise RuntimeError("boom")

    monkeypatch.setattr(cli_module, "app", boom)
    with pytest.raises(SystemExit) as e:
        cli_module.main()
    assert e.value.code == exit_codes.INTERNAL == 5


def test_failures_without_an_sla_are_warned(run_virtual_fn):
    m = run_virtual_fn(
        {
            "name": "f",
            "backend": {"kind": "sim", "fail_every": 4},
            "telemetry": {"gpu": False},
            "load": {
                "arrival": {"kind": "constant", "rate": 10},
                "requests": 40,
                "validity": LENIENT,
            },
        }
    )
    assert m["status"] == "ok"
    assert any(
        "measured requests failed" in w and "error_rate" in w for w in m["validity"]["warnings"]
    )


# --- 9. docker ------------------------------------------------------------------------------


def test_every_extra_the_dockerfile_installs_exists():
    import re

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the project supports 3.10

    root = Path(__file__).parents[2]
    extras = set(
        tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    dockerfile = (root / "docker" / "Dockerfile").read_text()
    assert '".[$EXTRAS]"' in dockerfile  # the extras installed are the build argument's
    default = re.search(r'^ARG EXTRAS="([a-z0-9_,-]+)"$', dockerfile, re.M)
    assert default, "the Dockerfile names its default extras"
    named = set(default.group(1).split(","))
    assert named <= extras, named - extras
    assert "http" in named  # the image can drive a served model
    assert "http" in extras  # and so can the light one (EXTRAS=http), built in CI


def test_a_stream_that_never_ends_fails_its_request_with_bounded_memory(tmp_path):
    """A server that keeps streaming past the tokens asked for: the request fails as a bad
    response once the stream holds more than the asked tokens could (memory stays bounded),
    and the run goes on."""
    chunk = b'data: {"choices": [{"text": "x", "finish_reason": null}]}\n\n'
    probe = b'data: {"choices": [{"text": "hi", "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def serve():
        first = True
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            request = conn.recv(65536)
            head = (
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            )
            try:
                if request.startswith(b"GET "):  # /v1/models: where the tokenizer is
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    conn.close()
                    continue
                if first:  # the probe: a proper two-token answer
                    conn.sendall(head + probe)
                else:
                    conn.sendall(head)
                    deadline = time.monotonic() + 20  # bounded: the client hangs up first
                    while time.monotonic() < deadline and not stop.is_set():
                        conn.sendall(chunk * 64)
            except OSError:
                pass
            first = False
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        path = openai_scenario(tmp_path, sock.getsockname()[1], api="completions")
        r = cli("run", path, "--out", tmp_path / "run", "-q")
    finally:
        stop.set()
        sock.close()
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert set(m["requests"]["errors_by_type"]) == {"bad_response"}, (r.stderr, m["requests"])


class OneAnswerServer:
    """Answers one streamed completion a connection, keeps it open (no ``Connection: close``),
    and drops it when the next request comes on it, after ``work_s`` (0: at once, unread: a
    keep-alive running out as the client sends; more: a server that worked on it, then failed).
    Counts what it answered and what it dropped, and every request it received."""

    STREAM = b"".join(
        [b'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\n'] * 3
        + [
            b'data: {"choices": [{"text": "a", "finish_reason": "length"}]}\n\n',
            b"data: [DONE]\n\n",
        ]
    )

    def __init__(self, stream: bytes = STREAM, work_s: float = 0.0, keep: bool = False) -> None:
        """``keep``: answer every request on a connection instead (a well-behaved server)."""
        self.stream, self.work_s, self.keep = stream, work_s, keep
        self.received: list[str] = []  # every request's path, answered or dropped
        self.dropped_paths: list[str] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.answered = self.dropped = 0
        self.paths: list[str] = []  # of the requests answered, in order
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        seen, answers = b"", 0
        try:
            while True:
                while b"\r\n\r\n" not in seen:
                    got = conn.recv(65536)
                    if not got:
                        return
                    seen += got
                head, _, seen = seen.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                path = head.split(b" ")[1].decode()
                self.received.append(path)
                if answers and not self.keep:  # a kept-alive connection's next: dropped
                    time.sleep(self.work_s)
                    self.dropped += 1
                    self.dropped_paths.append(path)
                    return
                while len(seen) < length:
                    seen += conn.recv(65536)
                seen = seen[length:]
                self.paths.append(head.split(b" ")[1].decode())
                if head.startswith(b"GET "):  # /v1/models: where the tokenizer is
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(self.stream), self.stream))  # fmt: skip
                    self.answered += 1
                answers += 1
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()


def _one_user_run(tmp_path: Path, server: OneAnswerServer, requests: int):
    """``loadtest run`` of one closed-loop user sending ``requests`` completions to
    ``server`` (closed after): the process and its metrics."""
    try:
        path = openai_scenario(tmp_path, server.port, api="completions")
        load = ["load.arrival={kind: concurrency, users: 1}", f"load.requests={requests}",
                "load.duration=null", "load.validity={max_dispatch_lag_p99: 2s}"]  # fmt: skip
        r = cli(
            "run", path, "--out", tmp_path / "run", "-q", *sum((["--set", s] for s in load), [])
        )
    finally:
        server.close()
    return r, json.loads((tmp_path / "run" / "metrics.json").read_text())


@pytest.mark.parametrize("work_s", [0.0, 0.2])
def test_a_request_the_server_had_is_never_sent_twice(tmp_path, work_s):
    """A request written onto a kept-alive connection that the server then drops, unread or
    after working on it, may have been done: it is the server's failure, counted, and never
    sent again (an earlier client sent each twice and reported them all completed)."""
    server = OneAnswerServer(work_s=work_s)
    r, m = _one_user_run(tmp_path, server, 12)
    req = m["requests"]
    assert req["completed"] + req["failed"] == req["sent"] == 12, (r.stderr, req)
    # every request the client sent the server received once: the measured ones and the
    # start-up probe (one completion)
    assert server.received.count("/v1/completions") == req["sent"] + 1, server.received
    # each completion dropped on a kept-alive connection is a measured failure
    assert req["failed"] == server.dropped_paths.count("/v1/completions") >= 5
    assert set(req["errors_by_type"]) <= {"server_disconnected", "connection_reset"}
    assert not req.get("connection_retries")


def test_a_bug_in_loadtest_while_reading_a_request_is_an_internal_error_not_a_server_failure(
    tmp_path, monkeypatch
):
    """An exception a backend did not declare as the server's (a Failed event) is loadtest's
    own bug: the run stops with what it measured, says so, exits 5, and counts no request as
    failed against the server."""
    from loadtest.backends.sim import SimBackend
    from loadtest.cli.reports import exit_code
    from loadtest.results.model import RunMetrics

    submit = SimBackend.submit

    async def buggy(self, req, prompt_ids):
        if req.index == 5:
            raise TypeError("unhashable type: 'list'")  # e.g. an odd field read carelessly
        async for event in submit(self, req, prompt_ids):
            yield event

    monkeypatch.setattr(SimBackend, "submit", buggy)
    data = {"name": "bug", "backend": {"kind": "sim"}, "telemetry": {"gpu": False},
            "load": {"arrival": {"kind": "constant", "rate": 10}, "requests": 40,
                     "validity": LENIENT}}  # fmt: skip
    from tests.conftest import run_virtual_scenario

    m = run_virtual_scenario(tmp_path, data, ())
    assert m["status"] == "failed"
    assert m["requests"]["failed"] == 0 and m["requests"]["errors_by_type"] == {}
    assert m["harness"]["internal_error"] == "TypeError: unhashable type: 'list'"
    assert "internal error in loadtest while reading request 5" in m["harness"]["failure"]
    assert exit_code(RunMetrics.model_validate(m)) == exit_codes.INTERNAL == 5


@pytest.mark.parametrize(
    "event",
    [
        b'{"choices": ' + b"[" * 5000 + b"]" * 5000 + b"}",  # nested past any parser's depth
        b'{"type": "response.function_call_arguments.delta", "delta": "x", "output_index": [1]}',
    ],
    ids=["deep", "odd_output_index"],
)
def test_an_answer_too_deep_or_of_the_wrong_shape_is_a_bad_response(event):
    from loadtest.backends.openai.events import BadResponse, parse_event, responses_delta

    with pytest.raises(BadResponse):
        responses_delta(parse_event(event))


def _limit_open_files(soft: int, hard: int):
    def limit():
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return limit


def test_more_users_than_the_open_file_limit_holds_are_refused_before_the_run(tmp_path):
    """A closed loop over HTTP holds a connection a user. Under ``ulimit -n`` the soft limit is
    raised to the hard one, as load tools do; past the hard one the run is refused before it
    starts, naming the field and the number it needs (an earlier client ran out of files mid-run
    and called the server down)."""
    path = openai_scenario(tmp_path, 9, api="completions")
    text = (
        path.read_text()
        .replace("kind: constant", "kind: concurrency")
        .replace("rate: 2", "users: 1500")
    )
    path.write_text(text)
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "users: 1500" in x)

    def validate(soft, hard):
        return subprocess.run(
            [sys.executable, "-m", "loadtest", "validate", str(path)],
            capture_output=True, text=True, timeout=60, preexec_fn=_limit_open_files(soft, hard),
        )  # fmt: skip

    refused = validate(1024, 1024)
    assert refused.returncode == exit_codes.USAGE, refused.stdout + refused.stderr
    said = refused.stdout + refused.stderr
    assert f"{path.name}:{line}: load.arrival.users: 1500 users hold up to 1500 connections" in said
    assert "about 1756 open files" in said and "lets a process open 1024" in said
    # a soft limit below what is needed, under a hard one above it: raised, and accepted
    accepted = validate(1024, 4096)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr


def test_without_usage_a_closing_chunk_with_no_text_is_not_a_token(tmp_path):
    """Four tokens of text, then a chunk with no text that carries only the finish reason, and
    no usage: four tokens (an earlier client counted five)."""
    text = b'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\n'
    closing = b'data: {"choices": [{"text": "", "finish_reason": "length"}]}\n\ndata: [DONE]\n\n'
    r, m = _one_user_run(tmp_path, OneAnswerServer(text * 4 + closing, keep=True), 5)
    req = m["requests"]
    assert req["completed"] == 5 and req["output_tokens"] == 5 * 4, (r.stderr, req)
    assert m["latency_ms"]["itl"]["count"] == 5 * 3


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"<html><body>a login page</body></html>", b"text/html"),
        (b'{"choices": [{"text": "hi", "finish_reason": "stop"}]}', b"application/json"),
    ],
    ids=["html", "unstreamed_json"],
)
def test_a_probe_answer_no_request_could_read_fails_the_start(tmp_path, body, kind):
    """A 200 whose body is a web page, or one JSON answer where a stream was asked for: every
    request would end incomplete, so the start-up probe fails the start saying so (an earlier
    probe passed it, and every request then failed)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (kind, len(body))
    server = SilentServer(reply=head + body)
    try:
        path = openai_scenario(tmp_path, server.port, api="completions")
        r = cli("run", path, "--out", tmp_path / "run", "-q")
    finally:
        server.close()
    assert r.returncode == exit_codes.FAILED, r.stdout + r.stderr
    said = r.stdout + r.stderr
    assert "is not an OpenAI stream: incomplete_stream" in said and kind.decode() in said, said


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["load.arrival={kind: gamma, rate: 5, cv: 1e-300}"], "load.arrival.cv"),
        (["workload.models={a: 1e308, b: 1e308}"], "a weight is a positive number up to 1e+09"),
        (["backend.extra_body={temperature: .inf}"], "temperature: inf is not a JSON number"),
        (["backend.extra_body={a: [1, {b: .nan}]}"], "a.1.b: nan is not a JSON number"),
        (["backend.extra_body=" + "{a: " * 40 + "1" + "}" * 40], "nested deeper than 32"),
        (
            ["backend.api=chat", "workload.images={count: 64, width: 8192, height: 8192}"],
            "64 images of 8192x8192 are 12,288 MiB of pixels a request, over 256 MiB",
        ),
        (
            ["backend.api=chat", "workload.audio={count: 16, seconds: 600, sample_rate: 192000}"],
            "16 clips of 600 s at 192000 Hz are 3,516 MiB of samples a request",
        ),
    ],
    ids=["cv", "weights", "inf", "nan", "deep", "images", "audio"],
)
def test_numbers_past_what_a_run_can_use_are_refused_by_field(tmp_path, overrides, said):
    """Floors and ceilings at validation: values that would overflow the plan (an earlier run
    ended in an internal error) or be sent as something other than JSON are usage errors."""
    path = openai_scenario(tmp_path, 9, api="completions")
    args = sum((["--set", o] for o in overrides), [])
    r = cli("validate", path, *args)
    assert r.returncode == exit_codes.USAGE, r.stdout + r.stderr
    assert said in r.stdout + r.stderr, r.stdout + r.stderr


def test_a_port_that_speaks_another_protocol_fails_the_start_saying_so(tmp_path):
    """An SSH server's banner where an HTTP server was expected: the start fails (exit 4),
    naming what came back (an earlier client ended in an internal error)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)

    def serve():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
            threading.Timer(5, conn.close).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        path = openai_scenario(tmp_path, sock.getsockname()[1], api="completions")
        r = cli("run", path, "--out", tmp_path / "run", "-q")
    finally:
        sock.close()
    assert r.returncode == exit_codes.FAILED, r.stdout + r.stderr
    assert "internal error" not in r.stderr
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    error = m["backend"]["error"]
    assert "not an HTTP status line: b'SSH-2.0-OpenSSH_9.6" in error, error


def test_a_trace_line_past_its_budget_is_refused_unread(tmp_path, monkeypatch):
    """A trace of one endless line (no newline) is refused at the line, never read whole."""
    from loadtest.workload import traces

    monkeypatch.setattr(traces, "MAX_LINE_BYTES", 1024)
    (tmp_path / "t.txt").write_text("0.1\n0.2\n" + "9" * 5000)
    lines = traces._lines(tmp_path / "t.txt")
    assert [next(lines), next(lines)] == [(1, "0.1\n"), (2, "0.2\n")]
    with pytest.raises(ScenarioError, match=r"t\.txt:3: a line over 1,024 bytes; not read"):
        next(lines)


def test_an_input_file_past_its_budget_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from loadtest.core import outside

    monkeypatch.setattr(outside, "MAX_INPUT_BYTES", 1 << 20)
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"x" * ((1 << 20) + 1))
    with pytest.raises(ScenarioError, match=r"big\.jsonl:1: larger than 1 MiB; not read"):
        outside.read_input(big, "dataset")
