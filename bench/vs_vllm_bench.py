"""loadtest and ``vllm bench serve`` side by side against the same vLLM, alternating.

Both send the same traffic: Poisson arrivals at ``--rate``, ``--requests`` requests of exactly
``--input-len`` prompt tokens (each tool sizes its prompts with the model's tokenizer) and
``--output-len`` output tokens (``ignore_eos``), schedule seed ``--seed``; neither warms up. The
tools run one after the other, ``--rounds`` times, so drift on the machine lands on both.

The definitions, aligned where they can be:
- TTFT: vLLM's bench times it from its send to the first chunk with ``choices`` (in chat the
  role-only chunk); loadtest's ``ttft`` is from the intended send (the schedule's time) and its
  ``ttft_service`` from the actual send to the first token's chunk: ``ttft_service`` is the one
  to set beside vLLM's.
- TPOT: (last token - first token) / (tokens - 1), per request, in both.
- ITL: vLLM's bench records one gap per chunk; loadtest one per token (a stamp per token; vLLM
  streams a chunk per token, so they agree when no read holds several chunks).
- E2E: vLLM's from its send; loadtest's ``e2e`` from the intended send, ``e2e_service`` from the
  actual one.

With no ``--url`` a vLLM is started here (``tests/real_servers.py``: the tiny model the tests
build, vLLM from ``python -m tests.real_servers install``), pinned with the client as the
machine allows. Figures: docs/benchmarks.md.

    python bench/vs_vllm_bench.py --rate 4 --requests 120 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VLLM_BENCH = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n"
)  # `vllm bench serve` without the `vllm` command, which looks for a distribution named vllm
ROWS = [  # (label, loadtest metric and field, vLLM bench key)
    ("TTFT p50 (ms)", ("ttft_service", "p50"), "median_ttft_ms"),
    ("TTFT p99 (ms)", ("ttft_service", "p99"), "p99_ttft_ms"),
    ("TTFT from plan p50 (ms)", ("ttft", "p50"), None),
    ("TPOT p50 (ms)", ("tpot", "p50"), "median_tpot_ms"),
    ("TPOT p99 (ms)", ("tpot", "p99"), "p99_tpot_ms"),
    ("ITL p50 (ms)", ("itl", "p50"), "median_itl_ms"),
    ("ITL p99 (ms)", ("itl", "p99"), "p99_itl_ms"),
    ("E2E p50 (ms)", ("e2e_service", "p50"), "median_e2el_ms"),
    ("E2E p99 (ms)", ("e2e_service", "p99"), "p99_e2el_ms"),
    ("output tok/s", None, "output_throughput"),
]


def run_loadtest(args, url: str, model: str, tokenizer: str, out: Path) -> dict:
    scenario = {
        "name": "vs-vllm-bench",
        "seeds": {"schedule": args.seed, "prompts": args.seed, "lengths": args.seed},
        "backend": {
            "kind": "openai",
            "base_url": url,
            "model": model,
            "tokenizer": tokenizer,
            "api": args.api,
        },
        "workload": {"input_tokens": args.input_len, "output_tokens": args.output_len},
        "load": {
            "arrival": {"kind": "poisson", "rate": args.rate},
            "requests": args.requests,
            "validity": {"max_dispatch_lag_p99": "1s", "max_loop_lag_p99": "1s"},
        },
        "telemetry": {"server": False, "gpu": False},
    }
    path = out.with_suffix(".yml")
    path.write_text(yaml.safe_dump(scenario))
    subprocess.run(
        [sys.executable, "-m", "loadtest", "run", str(path), "-o", str(out), "-q", "--no-report"],
        check=False,
        stdout=subprocess.DEVNULL,
    )
    return json.loads((out / "metrics.json").read_text())


def run_vllm_bench(args, python: str, url: str, model: str, tokenizer: str, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    backend = "openai-chat" if args.api == "chat" else "openai"
    endpoint = "/v1/chat/completions" if args.api == "chat" else "/v1/completions"
    subprocess.run(
        [
            python, "-c", VLLM_BENCH,
            "--backend", backend, "--base-url", url.removesuffix("/v1"), "--endpoint", endpoint,
            "--model", model, "--tokenizer", tokenizer,
            "--dataset-name", "random", "--random-input-len", str(args.input_len),
            "--random-output-len", str(args.output_len), "--random-range-ratio", "0",
            "--num-prompts", str(args.requests), "--request-rate", str(args.rate),
            "--seed", str(args.seed), "--ignore-eos",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
            "--save-result", "--result-dir", str(out), "--result-filename", "result.json",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        env={"VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    return json.loads((out / "result.json").read_text())


def loadtest_value(m: dict, where) -> float | None:
    if where is None:
        return m["throughput"]["output_tokens_per_s"]
    metric, field = where
    return m["latency_ms"][metric][field]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running vLLM's API (default: start one here)")
    ap.add_argument("--model", default="tiny", help="the served model name")
    ap.add_argument("--tokenizer", help="the model's folder (with --url)")
    ap.add_argument("--api", choices=["completions", "chat"], default="completions")
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--requests", type=int, default=120)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from tests import real_servers

    python = real_servers.vllm_python()
    if python is None:
        sys.exit("vLLM is not installed: python -m tests.real_servers install")
    work = Path(tempfile.mkdtemp(prefix="vs-vllm-bench-"))
    server = None
    if args.url is None:
        model_dir = real_servers.build_vllm_model(work / "model")
        server = real_servers.start_vllm(python, model_dir, work, compiled=True)
        url, tokenizer = server.url, str(model_dir)
    else:
        url, tokenizer = args.url, args.tokenizer or args.model
    try:
        rounds = []
        for k in range(args.rounds):
            lt = run_loadtest(args, url, args.model, tokenizer, work / f"loadtest-{k}")
            vb = run_vllm_bench(args, str(python), url, args.model, tokenizer, work / f"vb-{k}")
            rounds.append((lt, vb))
            print(f"round {k + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        if server is not None:
            server.stop()
    print(
        f"# {args.api}, Poisson {args.rate:g} req/s, {args.requests} requests of "
        f"{args.input_len} in / {args.output_len} out, seed {args.seed}; "
        f"{args.rounds} rounds, loadtest then vLLM bench each round"
    )
    print(
        "| metric | "
        + " | ".join(f"loadtest r{k + 1} | vllm bench r{k + 1}" for k in range(args.rounds))
        + " |"
    )
    print("|---|" + "---|---|" * args.rounds)
    for label, where, key in ROWS:
        cells = []
        for lt, vb in rounds:
            a = loadtest_value(lt, where)
            b = vb.get(key) if key else None
            cells += ["-" if a is None else f"{a:.3g}", "-" if b is None else f"{b:.3g}"]
        print(f"| {label} | " + " | ".join(cells) + " |")
    for k, (lt, vb) in enumerate(rounds):
        print(
            f"round {k + 1}: loadtest {lt['status']}"
            f"{'' if lt['validity']['valid'] else ' (invalid: ' + lt['validity']['reasons'][0][:120] + ')'}, "
            f"prompt tokens mean (server) {lt['requests']['input_tokens'] / max(1, lt['requests']['completed']):.1f}; "
            f"vLLM bench total input tokens {vb.get('total_input_tokens')} for {vb.get('completed')} requests"
        )


if __name__ == "__main__":
    main()
