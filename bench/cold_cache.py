"""A bench variant in a child process of its own, with empty inductor and Triton caches: what a
first compile on a fresh machine costs (bench/compile_warmup.py, bench/regional_compile.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile


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
