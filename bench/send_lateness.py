"""Does dispatch lag mean what it says? loadtest against a server that stamps each request's
arrival, on one host, side by side: the client's dispatch lag (its send stamp, when the headers
reach the socket, minus the intended time) against how late each request reached the server's
handler (the server's CLOCK_MONOTONIC stamp minus t0 + the intended time).

    PYTHONPATH=. python bench/send_lateness.py [--rate 600] [--seconds 10]

The server (``tests/fast_openai_server.py``) puts its arrival stamp in each response id; the
run's ``requests.jsonl`` keeps the id, and ``metrics.json`` keeps t0 on the same clock
(``window.t0_clock_ns``). The server's figure includes what no client stamp can see (the
kernel, the server's own parsing), so it is the upper bound the client's must approach.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

FAST_SERVER = Path(__file__).resolve().parents[1] / "tests" / "fast_openai_server.py"

from loadtest.core.histogram import LatencyHistogram


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=600)
    ap.add_argument("--seconds", type=float, default=10)
    args = ap.parse_args()
    port = free_port()
    # the server on one core, the client on another (as the issue measured), when there are two
    cores = sorted(os.sched_getaffinity(0))
    two = len(cores) >= 2

    def pin(cpu: int):
        return lambda: os.sched_setaffinity(0, {cpu})

    server = subprocess.Popen(
        [sys.executable, str(FAST_SERVER), "--port", str(port)],
        preexec_fn=pin(cores[-1]) if two else None,
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # the server is up when it lists its model
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not start within 30 s") from None
                time.sleep(0.2)
        with tempfile.TemporaryDirectory() as tmp:
            scenario = Path(tmp) / "s.yml"
            scenario.write_text(
                f"""
name: send-lateness
seeds: {{schedule: 1}}
backend: {{kind: openai, base_url: "http://127.0.0.1:{port}/v1", model: stub-model,
           api: completions, tokenizer: null}}
workload: {{input_tokens: 16, output_tokens: 16}}
load: {{arrival: {{kind: poisson, rate: {args.rate}}}, duration: {args.seconds}s, warmup: 1s}}
outputs: {{requests_jsonl: true}}
"""
            )
            out = Path(tmp) / "run"
            r = subprocess.run(
                [sys.executable, "-m", "loadtest", "run", str(scenario), "-o", str(out), "-q",
                 "--no-report"],
                capture_output=True, text=True, timeout=args.seconds + 120,
                preexec_fn=pin(cores[0]) if two else None,
            )  # fmt: skip
            if not (out / "metrics.json").exists():
                raise SystemExit(f"no result (exit {r.returncode}): {r.stderr[-2000:]}")
            m = json.loads((out / "metrics.json").read_text())
            t0 = m["window"]["t0_clock_ns"]
            client, seen = LatencyHistogram(), LatencyHistogram()
            for line in (out / "requests.jsonl").read_text().splitlines():
                rec = json.loads(line)
                rid = rec.get("response_id") or ""
                if not rid.startswith("arrived-") or rec.get("warmup"):
                    continue
                client.record_ns(max(0, rec["sent_ns"] - rec["intended_ns"]))
                seen.record_ns(max(0, int(rid.split("-", 1)[1]) - (t0 + rec["intended_ns"])))
    finally:
        server.terminate()
        server.wait(10)
    print(f"{args.rate:g} req/s Poisson, {client.count} measured requests, status {m['status']}")
    print("| figure | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|")
    for name, h in (
        ("client: dispatch lag (headers sent)", client),
        ("server: arrival lateness", seen),
    ):
        print(
            f"| {name} | {h.percentile_ms(50):.3f} | {h.percentile_ms(99):.3f} | "
            f"{h.percentile_ms(100):.3f} |"
        )
    print(f"metrics.json dispatch_lag p99: {m['latency_ms']['dispatch_lag']['p99']} ms")


if __name__ == "__main__":
    main()
