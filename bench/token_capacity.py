"""Token capacity: how many streamed tokens a second one client core reads and stamps on time,
loadtest (on its default loop, uvloop where installed, and as ``loadtest-asyncio`` on asyncio's
own) beside ``vllm bench serve`` and AIPerf (where they are installed), in one invocation.

The server is ``tests/fast_openai_server.py`` as an engine: every ``--step-ms``, one token to
every running stream at once (a batched decode step), served from ``--server-processes``
processes pinned to ``--server-cores`` so that it is never the limit; each process writes the
gaps it actually produced, the true inter-token gap a client's ITL is judged against. Every
client is pinned to ``--client-core`` and asked for the same traffic: Poisson arrivals at the
rate, ``rate x --seconds`` requests of ``--prompt-len`` prompt tokens and exactly
``--output-len`` output tokens (``ignore_eos``; the server honours ``max_tokens`` and
``max_completion_tokens``), no warm-up. Rates step up through ``--rates``; a tool stops stepping
after the first rate it fails.

A tool fails a rate when its ITL p99 is more than 0.5 ms past the server's true gap p99, or it
judged its own run invalid (only loadtest judges itself). Beside each tool's own tokens a second
is what the server streamed to it, from the first request's arrival to the last token: a tool
that falls behind its schedule stretches that span (a Poisson schedule's own span varies by
about 1/sqrt(requests), 8% at 150). The table says which, and
what each tool said of itself. CPU is the client's own: its processes' user + system time (the
kernel's accounting, read from ``/proc`` every 50 ms for every process of its session) from its
run's first request's arrival (a probe or test request before the run is left out) to the last
token's write, per token asked for; start-up, imports and reports fall outside it.

    python bench/token_capacity.py --server-cores 0 --client-core 1 --rates 25,50,100,200,400
    python bench/token_capacity.py --server-cores 2-15 --server-processes 14 --client-core 1 \\
        --rates 100,200,400,800,1600       # the 16-core host, CPU only
    python bench/token_capacity.py --server-cores 0-7 --server-processes 8 --client-core 12-15 \\
        --workers 4 --tools loadtest --rates 400,600,800   # loadtest's workers, a core each

vLLM comes from ``python -m tests.real_servers install``; AIPerf from ``--aiperf`` (its
command, e.g. a venv's ``bin/aiperf``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.vs_vllm_bench import VLLM_BENCH

ITL_SLACK_MS = 0.5  # the goal: ITL p99 within this of the server's true gap p99
MODEL = "stub-model"


def pinned(cores: str, argv: list[str]) -> list[str]:
    return (["taskset", "-c", cores] if shutil.which("taskset") else []) + argv


SAMPLE_S = 0.05  # how often a client's CPU is read while it runs


class SessionCpu:
    """CPU seconds (user + system, with the children they waited for) of every live process of
    session ``sid``: a client and whatever it started. ``/proc`` is searched for its processes
    once a second; between, only theirs are read (a search costs ~2 ms of CPU, a read ~20 µs)."""

    RESCAN_S = 1.0

    def __init__(self, sid: int) -> None:
        self.sid, self.pids, self.scanned = sid, set(), -self.RESCAN_S

    def __call__(self) -> float:
        if time.monotonic() - self.scanned > self.RESCAN_S:
            self.scanned = time.monotonic()
            self.pids = {int(e.name) for e in os.scandir("/proc") if e.name.isdigit()}
        total, mine = 0, set()
        for pid in self.pids:
            try:
                raw = Path(f"/proc/{pid}/stat").read_bytes()
            except OSError:  # gone meanwhile
                continue
            fields = raw[raw.rindex(b")") + 2 :].split()  # from field 3, state (proc(5))
            if int(fields[3]) == self.sid:  # field 6, session
                mine.add(pid)
                total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        self.pids = mine
        return total / os.sysconf("SC_CLK_TCK")


def run_measured(argv: list[str], env: dict | None = None, timeout: float = 900) -> list:
    """Run ``argv`` to its end, in a session of its own; its CPU seconds as it ran, sampled
    every ``SAMPLE_S``: ``[(time.monotonic_ns(), CPU seconds so far)]``, the last at its exit
    from the kernel's accounting of it and its waited-for children."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True
    )
    deadline = time.monotonic() + timeout
    samples, session_cpu = [], SessionCpu(proc.pid)
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise TimeoutError(f"{argv[:4]} ran past {timeout:.0f} s")
        samples.append((time.monotonic_ns(), session_cpu()))
        time.sleep(SAMPLE_S)
    samples.append((time.monotonic_ns(), usage.ru_utime + usage.ru_stime))
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 1, 3):  # loadtest: 1 SLA, 3 invalid; both still measured
        raise RuntimeError(f"{argv[:4]} exited {proc.returncode}: {err[-2000:]}")
    return samples


def cpu_at(samples: list, t_ns: int) -> float:
    """CPU seconds by ``t_ns``, between the samples either side of it."""
    before = [(t, c) for t, c in samples if t <= t_ns] or samples[:1]
    after = [(t, c) for t, c in samples if t >= t_ns] or samples[-1:]
    (t0, c0), (t1, c1) = before[-1], after[0]
    return c0 if t1 <= t0 else c0 + (c1 - c0) * (t_ns - t0) / (t1 - t0)


class Server:
    """The engine-mode fast server on ``port``, from ``processes`` processes on ``cores``."""

    def __init__(self, cores: str, processes: int, step_ms: float, work: Path, text: str) -> None:
        from tests.real_servers import free_port

        self.port, self.processes = free_port(), processes
        self.stats = Path(tempfile.mkdtemp(dir=work, prefix="server-"))
        argv = [
            sys.executable, str(ROOT / "tests" / "fast_openai_server.py"),
            "--port", str(self.port), "--processes", str(processes), "--step-ms", str(step_ms),
            "--stats-dir", str(self.stats), "--model", MODEL, "--text", text,
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            pinned(cores, argv),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.url + "/v1/models", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the fast server did not start") from None
                time.sleep(0.1)

    def stop(self) -> dict:
        """Stop every process; the true gaps they produced (p50, p99: the worst process's)."""
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 20  # every process writes its file as it exits
        while len(list(self.stats.glob("*.json"))) < self.processes:
            if time.monotonic() > deadline:
                print(f"only {len(list(self.stats.glob('*.json')))} of {self.processes} "
                      "server processes wrote their gaps", file=sys.stderr)  # fmt: skip
                break
            time.sleep(0.1)
        parts = [json.loads(p.read_text()) for p in self.stats.glob("*.json")]
        parts = [p for p in parts if p["gaps"]]
        if not parts:
            return {"p50_ms": None, "p99_ms": None, "served_tok_s": None}
        arrivals = sorted(a for p in parts for a in p["arrivals"])
        last = max(p["last_ns"] for p in parts)
        span_ns = last - arrivals[0]
        tokens = sum(p["tokens"] for p in parts)
        return {
            "last_ns": last,
            "arrivals": arrivals,
            "p50_ms": max(p["p50_ms"] for p in parts),
            "p99_ms": max(p["p99_ms"] for p in parts),
            "gaps": sum(p["gaps"] for p in parts),
            # what the server streamed, from the first request's arrival to the last token
            "served_tok_s": tokens / (span_ns / 1e9) if span_ns > 0 else None,
        }


def run_loadtest(
    args, url: str, tokenizer: str, rate: float, n: int, out: Path, loop: str = "auto"
) -> dict:
    scenario = {
        "name": f"capacity-{rate:g}",
        "seeds": {"schedule": 0, "prompts": 0, "lengths": 0},
        "backend": {
            "kind": "openai", "base_url": url + "/v1", "model": MODEL, "tokenizer": tokenizer,
            "api": "completions",
        },
        "workload": {"input_tokens": args.prompt_len, "output_tokens": args.output_len},
        "load": {
            "arrival": {"kind": "poisson", "rate": rate}, "requests": n,
            "workers": args.workers,
        },
        "telemetry": {"server": False, "gpu": False},
    }  # fmt: skip
    path = out.with_suffix(".yml")
    path.write_text(yaml.safe_dump(scenario))
    argv = [sys.executable, "-m", "loadtest", "run", str(path), "-o", str(out), "-q", "--no-report"]
    env = {**os.environ, "LOADTEST_EVENT_LOOP": loop}
    cpu = run_measured(pinned(args.client_core, argv), env)
    m = json.loads((out / "metrics.json").read_text())
    tokens = m["requests"]["output_tokens"]
    lat = m["latency_ms"]
    said = "valid" if m["validity"]["valid"] else "invalid: " + m["validity"]["reasons"][0][:110]
    return {
        "tok_s": m["throughput"]["output_tokens_per_s"],
        "itl_p99": lat["itl"]["p99"],
        "tokens": tokens,
        "cpu": cpu,
        "lag_p99": lat["dispatch_lag"]["p99"],
        "invalid": not m["validity"]["valid"],
        "loop_lag_p99": m["harness"]["loop_lag_ms"]["p99"],
        "said": f"{said}; dispatch lag p99 {lat['dispatch_lag']['p99']:.3g} ms"
        + f"; event-loop lag p99 {m['harness']['loop_lag_ms']['p99']:.3g} ms"
        + f"; event loop busy {m['harness']['loop_busy']:.0%}",
    }


def run_vllm_bench(
    args, python: str, url: str, tokenizer: str, rate: float, n: int, out: Path
) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    argv = [
        python, "-c", VLLM_BENCH,
        "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", MODEL, "--tokenizer", tokenizer,
        "--dataset-name", "random", "--random-input-len", str(args.prompt_len),
        "--random-output-len", str(args.output_len), "--random-range-ratio", "0",
        "--num-prompts", str(n), "--request-rate", str(rate),
        "--seed", "0", "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99", "--save-result", "--result-dir", str(out),
        "--result-filename", "result.json",
    ]  # fmt: skip
    env = {"VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    cpu = run_measured(pinned(args.client_core, argv), env)
    r = json.loads((out / "result.json").read_text())
    return {
        "tok_s": r["output_throughput"],
        "itl_p99": r["p99_itl_ms"],
        "tokens": r["total_output_tokens"],
        "cpu": cpu,
        "invalid": False,
        "said": f"nothing (ran {r['duration']:.1f} s for a {args.seconds:g} s schedule)",
    }


def run_aiperf(args, aiperf: str, url: str, tokenizer: str, rate: float, n: int, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    argv = [
        aiperf, "profile", "--model", MODEL, "--url", url, "--endpoint-type", "completions",
        "--streaming", "--request-rate", str(rate), "--request-count", str(n),
        "--synthetic-input-tokens-mean", str(args.prompt_len),
        "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(args.output_len),
        "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
        "--tokenizer", tokenizer, "--random-seed", "0", "--artifact-dir", str(out),
        "--use-server-token-count", "--ui-type", "none", "--workers-max", "1",
        "--no-server-metrics",
        "--record-processors", "1",
    ]  # fmt: skip
    # not HF_HUB_OFFLINE: AIPerf 0.13 then refuses a local tokenizer folder as a hub id
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    cpu = run_measured(pinned(args.client_core, argv), env)
    found = sorted(out.rglob("profile_export_aiperf.json"))
    if not found:
        raise RuntimeError(f"AIPerf wrote no profile_export_aiperf.json under {out}")
    r = json.loads(found[-1].read_text())

    def stat(name: str, key: str) -> float | None:
        v = r.get(name) or (r.get("records") or {}).get(name) or {}
        return v.get(key) if isinstance(v, dict) else None

    # its inter_token_latency is each request's mean gap; inter_chunk_latency is every gap
    # (a chunk a token here), as loadtest's and vLLM's ITL are
    return {
        "tok_s": stat("output_token_throughput", "avg"),
        "itl_p99": stat("inter_chunk_latency", "p99"),
        "tokens": stat("total_output_tokens", "avg"),
        "cpu": cpu,
        "invalid": False,
        "said": "nothing",
    }


def one_token_text(tokenizer: str) -> str:
    """A text that is one token of ``tokenizer`` wherever it stands in a stream, so a tool that
    counts tokens by tokenizing the text it got (vLLM's bench does) counts what the server
    sent."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    for word in (" the", " and", " a", "the", "a", "e", " "):
        ids = tok.encode(word * 8, add_special_tokens=False)
        if len(ids) == 8 and len(set(ids)) == 1:
            return word
    raise RuntimeError(f"no one-token word in {tokenizer}")


def judge(row: dict, true_p99: float | None) -> str | None:
    """Why the tool failed this rate (None: it did not)."""
    why = []
    if row.get("invalid"):
        why.append("judged itself invalid")
    if true_p99 is not None and row["itl_p99"] is not None:
        if row["itl_p99"] > true_p99 + ITL_SLACK_MS:
            why.append(f"ITL p99 {row['itl_p99'] - true_p99:+.2f} ms past the true gap's")
    return "; ".join(why) or None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="25,50,100,200,400", help="req/s, ascending")
    ap.add_argument("--seconds", type=float, default=10.0, help="each run's schedule")
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--step-ms", type=float, default=1.0, help="the server's inter-token gap")
    ap.add_argument("--server-cores", default="0")
    ap.add_argument("--server-processes", type=int, default=1)
    ap.add_argument("--client-core", default="1", help="its core, or cores (e.g. 12-15)")
    ap.add_argument(
        "--workers", type=int, default=1, help="loadtest's client processes (load.workers)"
    )
    ap.add_argument("--tools", default="loadtest,loadtest-asyncio,vllm,aiperf")
    ap.add_argument("--aiperf", default=shutil.which("aiperf"), help="AIPerf's command")
    ap.add_argument("--json", help="write every row here too")
    args = ap.parse_args()
    from tests import real_servers

    work = Path(tempfile.mkdtemp(prefix="token-capacity-"))
    tokenizer = str(real_servers.build_vllm_model(work / "model"))
    text = one_token_text(tokenizer)
    vllm = real_servers.vllm_python()
    runners = {  # loadtest on its default loop (uvloop, where installed), and on asyncio's
        "loadtest": lambda url, rate, n, out: run_loadtest(args, url, tokenizer, rate, n, out),
        "loadtest-asyncio": lambda url, rate, n, out: run_loadtest(
            args, url, tokenizer, rate, n, out, "asyncio"
        ),
    }
    if vllm is not None:
        runners["vllm"] = lambda url, rate, n, out: run_vllm_bench(
            args, str(vllm), url, tokenizer, rate, n, out
        )
    if args.aiperf:
        runners["aiperf"] = lambda url, rate, n, out: run_aiperf(
            args, args.aiperf, url, tokenizer, rate, n, out
        )
    tools = [t for t in args.tools.split(",") if t in runners]
    skipped = [t for t in args.tools.split(",") if t not in runners]

    def measure(tool: str, rate: float, n: int, name: str) -> tuple[dict, dict]:
        server = Server(args.server_cores, args.server_processes, args.step_ms, work, text)
        try:
            return runners[tool](server.url, rate, n, work / name), server.stop()
        except BaseException:
            server.stop()
            raise

    failed: set[str] = set()
    rows = []
    for rate in (float(r) for r in args.rates.split(",")):
        for tool in tools:
            if tool in failed:
                continue
            n = max(1, round(rate * args.seconds))
            try:
                row, true = measure(tool, rate, n, f"{tool}-{rate:g}")
            except (RuntimeError, TimeoutError) as exc:  # the tool broke: said, and not stepped on
                print(f"{tool} at {rate:g} req/s: {exc}", file=sys.stderr)
                failed.add(tool)
                continue
            # CPU a token: the client's from its run's first request (the last n to arrive:
            # a probe or test request comes before) to the last token written
            samples, arrivals = row.pop("cpu"), true.get("arrivals") or [None]
            start = arrivals[-min(n, len(arrivals))]
            row["cpu_us_token"] = (
                1e6
                * (cpu_at(samples, true["last_ns"]) - cpu_at(samples, start))
                / (n * args.output_len)
                if start
                else None
            )
            offered = rate * args.output_len
            row.update(
                tool=tool, rate=rate, offered=offered, true_p99=true["p99_ms"],
                served_tok_s=true["served_tok_s"],
            )  # fmt: skip
            row["failed"] = judge(row, true["p99_ms"])
            if row["failed"]:
                failed.add(tool)
            rows.append(row)
            print(f"{tool} at {rate:g} req/s: {row['failed'] or 'carried'}", file=sys.stderr)
    print(
        f"# {args.output_len} tokens a request, {args.step_ms:g} ms apart; Poisson, "
        f"{args.seconds:g} s a run; server: {args.server_processes} process(es) on cores "
        f"{args.server_cores}; client on core(s) {args.client_core}"
        + (f", loadtest in {args.workers} workers" if args.workers > 1 else "")
        + (f"; not installed: {', '.join(skipped)}" if skipped else "")
    )
    print(
        "| tool | req/s | offered tok/s | its tok/s (server's) | ITL p99 ms (true gap p99) "
        "| client CPU µs/token | what it said of itself | fails: why |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        cpu = "-" if r["cpu_us_token"] is None else f"{r['cpu_us_token']:.1f}"
        print(
            f"| {r['tool']} | {r['rate']:g} | {r['offered']:,.0f} | "
            f"{'-' if r['tok_s'] is None else format(r['tok_s'], ',.0f')} "
            f"({'-' if r['served_tok_s'] is None else format(r['served_tok_s'], ',.0f')}) | "
            f"{'-' if r['itl_p99'] is None else format(r['itl_p99'], '.3g')} "
            f"({'-' if r['true_p99'] is None else format(r['true_p99'], '.3g')}) | {cpu} | "
            f"{r['said']} | {r['failed'] or '-'} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
