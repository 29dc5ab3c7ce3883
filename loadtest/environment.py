"""What the numbers were measured on: versions, commit, host. Reads only; imports nothing heavy
(torch and transformers versions are reported only when the backend already imported them)."""
from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

from . import __version__


def git_commit(path: Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout holding ``path``, or (None, None)."""
    try:
        commit = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=5)
        return commit.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def collect(seeds: dict, scenario_sha256: str) -> dict:
    commit, dirty = git_commit(Path(__file__).resolve().parent)
    env = {
        "tool": "loadtest", "tool_version": __version__, "commit": commit, "dirty": dirty,
        "python": platform.python_version(), "implementation": platform.python_implementation(),
        "platform": platform.platform(), "machine": platform.machine(), "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(), "seeds": seeds, "scenario_sha256": scenario_sha256,
        "container_image": os.environ.get("LOADTEST_CONTAINER_IMAGE"),
        "python_debug_build": hasattr(sys, "gettotalrefcount"),
    }
    for name in ("torch", "transformers"):
        module = sys.modules.get(name)
        if module is not None:
            env[name] = getattr(module, "__version__", None)
    return env
