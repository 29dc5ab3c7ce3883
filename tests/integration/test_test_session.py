"""The test session itself: a SIGTERM stops the servers its fixtures started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FIXTURE = """
import subprocess, sys, time
import pytest

@pytest.fixture(scope="session")
def server(tmp_path_factory):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                            start_new_session=True)  # as tests/real_servers.py starts them
    open({pid_file!r}, "w").write(str(proc.pid))
    yield proc
    proc.kill()
    proc.wait()

def test_holds_it(server):
    time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie no one reaped yet is gone for this purpose
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def test_a_sigterm_stops_the_servers_a_session_fixture_started(tmp_path):
    """pytest, SIGTERMed mid-test, runs the finalizer of the session fixture that started a
    server in a session of its own: the server is gone within seconds, not left running."""
    pid_file = tmp_path / "server.pid"
    (tmp_path / "test_holding.py").write_text(FIXTURE.format(pid_file=str(pid_file)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.stopping", "-p", "no:cacheprovider",
         str(tmp_path / "test_holding.py")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.1)
    server = int(pid_file.read_text())
    try:
        assert _alive(server)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode != 0, out
        deadline = time.monotonic() + 30
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server), out
    finally:
        if _alive(server):
            os.kill(server, signal.SIGKILL)
