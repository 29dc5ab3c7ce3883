"""A bench variant in a child process of its own, with empty inductor and Triton caches: what a
first compile on a fresh machine costs (bench/investigations/compile_warmup.py, bench/investigations/regional_compile.py)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def run_cold(script: str, args: list[str], timeout_s: float = 400) -> subprocess.CompletedProcess:
    """``python script *args`` with fresh, empty compile caches, removed after it."""
    with tempfile.TemporaryDirectory() as cache:
        env = {
            **os.environ,
            "TORCHINDUCTOR_CACHE_DIR": cache + "/inductor",
            "TRITON_CACHE_DIR": cache + "/triton",
        }
        return subprocess.run(
            [sys.executable, script, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
        )


def variant_args(child, variants) -> tuple[argparse.Namespace, list[str]] | None:
    """Both sides of a cold-cache bench's command line (``--model``, ``--only``; ``--child``
    marks the child): in the child, run ``child(variant, model)`` and print its JSON (None
    back); in the parent, the arguments and the variants chosen, in order."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--child", default=None)
    ap.add_argument("--only", default=None, help="comma list of variant numbers (1-based)")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.model)))
        return None
    names = list(variants)
    return args, [names[int(i) - 1] for i in args.only.split(",")] if args.only else names


def run_variants(child, variants, script: str) -> list[tuple[str, dict | None]] | None:
    """A cold-cache bench's parent side (``variant_args``; None in the child, which has run):
    each chosen variant's child of ``script`` in turn, cold (``run_cold``), and its JSON result,
    or None where it failed; each printed as it finishes, so a call cut short still shows the
    rest."""
    parsed = variant_args(child, variants)
    if parsed is None:
        return None
    args, chosen = parsed
    rows: list[tuple[str, dict | None]] = []
    for name in chosen:
        r = run_cold(script, ["--child", name, "--model", args.model])
        if r.returncode:
            print(f"{name}: failed\n{r.stderr.strip()[-1500:]}", flush=True)
            rows.append((name, None))
            continue
        d = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"{name}: {json.dumps(d)}", flush=True)
        rows.append((name, d))
    return rows


def dummy_model(arch: str):
    """``dummy:<arch>`` in bf16 on the GPU, random weights (the engine's own ``dummy:`` build)."""
    import torch
    import transformers

    from loadtest.backends.transformers.loading import dummy_config

    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(
            dummy_config(arch), dtype=torch.bfloat16
        )
    return model.eval()


def timed_generate(model, batch: int, prompt: int, **kwargs) -> float:
    """Seconds for one greedy generate() of ``batch`` random prompts, device synced around it."""
    import torch

    ids = torch.randint(0, 1000, (batch, prompt), device="cuda")
    torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
    torch.cuda.synchronize()
    return time.perf_counter() - t
