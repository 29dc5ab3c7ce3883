"""How often a real vLLM's greedy answer under load matches its answer to the same request
alone: the answer check (``answers:``) against the suite's CPU vLLM and tiny model, at 1, 4
and 16 users. A figure, not a goal: whatever vLLM gives is what is printed.

    python bench/answers_vllm.py      # needs `python -m tests.real_servers install`
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import real_servers

USERS = (1, 4, 16)
REQUESTS = 96


def main() -> None:
    python = real_servers.vllm_python()
    if python is None:
        sys.exit("vLLM is not installed: python -m tests.real_servers install")
    work = Path(tempfile.mkdtemp(prefix="answers-vllm-"))
    model = real_servers.build_vllm_model(work / "model")
    server = real_servers.start_vllm(python, model, work, None)
    try:
        print(f"vLLM {real_servers.VLLM_VERSION} (CPU), tiny model, {REQUESTS} requests of 64 "
              "prompt and 32 output tokens, every one compared")  # fmt: skip
        print("users  compared  matched  match rate (95% interval)  first divergence (chars)")
        for users in USERS:
            data = {
                "name": f"answers-{users}",
                "backend": {
                    "kind": "openai",
                    "base_url": server.url,
                    "model": server.served_name,
                    "api": "completions",
                },  # fmt: skip
                "workload": {"input_tokens": 64, "output_tokens": 32},
                "load": {
                    "arrival": {"kind": "concurrency", "users": users},
                    "requests": REQUESTS,
                    "validity": {
                        "max_dispatch_lag_p99": "10s",
                        "max_loop_lag_p99": "10s",
                        "max_stamp_delay_share": 1000.0,
                    },  # fmt: skip
                },
                "answers": {"sample": 1.0},
                "sla": {"answers_match_min": 0.0, "confidence": 0.95},
            }
            path = work / f"u{users}.yml"
            path.write_text(yaml.safe_dump(data))
            out = work / f"run-{users}"
            subprocess.run(
                [sys.executable, "-m", "loadtest", "run", str(path), "-o", str(out), "-q",
                 "--no-report"],
                capture_output=True, text=True, timeout=1200,
            )  # fmt: skip
            a = json.loads((out / "metrics.json").read_text())["answers"]
            lo, hi = a["match_interval"] or (0, 0)
            d = a["first_divergence"] or {}
            print(f"{users:>5}  {a['compared']:>8}  {a['matched']:>7}  "
                  f"{a['match_rate']:.1%} ({lo:.1%}..{hi:.1%})        "
                  f"{d.get('min', '-')}..{d.get('max', '-')} (median {d.get('p50', '-')})")  # fmt: skip
    finally:
        server.stop()


if __name__ == "__main__":
    main()
