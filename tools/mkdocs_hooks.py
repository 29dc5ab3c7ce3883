"""mkdocs hooks: the scenario reference is regenerated from the code before every build."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def on_pre_build(config, **kwargs) -> None:
    script = Path(__file__).resolve().parent / "scenario_reference.py"
    subprocess.run([sys.executable, str(script)], check=True)
