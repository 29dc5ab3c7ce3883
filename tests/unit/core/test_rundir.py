"""Run directories: --overwrite removes only what a loadtest run wrote, only from a run
directory, never from one a live run holds; a user's own files are never touched."""

from __future__ import annotations

import subprocess
import sys

import pytest

from loadtest.core import atomic, rundir
from loadtest.core.errors import OutputError


def test_a_folder_that_merely_holds_a_metrics_file_is_never_emptied(tmp_path):
    (tmp_path / "metrics.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("keep")
    with pytest.raises(OutputError, match="holds files no loadtest run wrote"):
        rundir.claim(tmp_path, overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "keep"
    assert (tmp_path / "metrics.json").read_text() == "{}"


def test_overwrite_removes_what_the_run_wrote_and_nothing_else(tmp_path):
    run = rundir.claim(tmp_path / "run")
    atomic.write_text(run / "metrics.json", "{}")
    atomic.write_text(run / "report.md", "# r")
    point = rundir.claim(run / "point-00")  # a run directory inside (a sweep's point)
    atomic.write_text(point / "metrics.json", "{}")
    (run / "notes.txt").write_text("mine")  # the user's, beside the result
    (point / "mine.txt").write_text("mine too")
    with pytest.raises(OutputError, match="pass --overwrite"):
        rundir.claim(run)
    assert rundir.claim(run, overwrite=True) == run
    left = sorted(p.relative_to(run).as_posix() for p in run.rglob("*"))
    assert left == [".loadtest-run", "notes.txt", "point-00", "point-00/mine.txt"]
    # the fresh marker lists nothing yet: the next run's files are added as it writes them
    assert (run / ".loadtest-run").read_text() == ""


def test_a_live_runs_directory_is_never_taken(tmp_path):
    run = tmp_path / "live"
    holder = subprocess.Popen(
        [
            sys.executable, "-c",
            "import sys, time\nfrom loadtest.core import rundir, atomic\n"
            f"rundir.claim({str(run)!r})\natomic.write_text(rundir.Path({str(run)!r}) / 'metrics.json', '{{}}')\n"
            "print('ready', flush=True)\ntime.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(OutputError, match="a loadtest run is writing there now"):
            rundir.claim(run, overwrite=True)
        assert (run / "metrics.json").exists()
    finally:
        holder.kill()
        holder.wait()
    assert rundir.claim(run, overwrite=True) == run  # its process gone, the lock went with it
    assert not (run / "metrics.json").exists()


def test_a_marker_never_names_anything_outside_its_folder(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    run = rundir.claim(tmp_path / "run")
    atomic.write_text(run / "metrics.json", "{}")
    with (run / ".loadtest-run").open("a") as f:
        f.write("../victim.txt\n..\n.\n")
    rundir.claim(run, overwrite=True)
    assert victim.read_text() == "keep" and not (run / "metrics.json").exists()


def test_a_plain_file_as_the_output_is_refused_as_such(tmp_path):
    (tmp_path / "out").write_text("x")
    with pytest.raises(OutputError, match="is a file, not a directory"):
        rundir.claim(tmp_path / "out", overwrite=True)


def test_a_default_run_directory_that_cannot_be_made_is_an_error_not_a_traceback(tmp_path):
    (tmp_path / "afile").write_text("x")  # reports/ under a file: as unwritable as read-only
    with pytest.raises(OutputError, match="cannot create the run directory: Not a directory"):
        rundir.default_dir("demo", tmp_path / "afile" / "reports")


def _crash_after_claiming(path, *, kill: bool) -> int:
    """A process that claims ``path`` and dies before writing anything: an exception (its
    interpreter exits) or SIGKILL (nothing of it runs)."""
    end = (
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)" if kill else "raise SystemExit(5)"
    )
    code = f"from loadtest.core import rundir\nrundir.claim(rundir.Path({str(path)!r}))\n{end}\n"
    return subprocess.run([sys.executable, "-c", code], timeout=60).returncode


def test_a_run_that_crashed_before_its_first_file_leaves_no_directory_behind(tmp_path):
    assert _crash_after_claiming(tmp_path / "crashed", kill=False) == 5
    assert not (tmp_path / "crashed").exists()
    (tmp_path / "mine").mkdir()  # a user's empty folder given as --out stays, empty
    assert _crash_after_claiming(tmp_path / "mine", kill=False) == 5
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())


def test_a_directory_a_killed_run_claimed_and_left_empty_is_taken_without_overwrite(tmp_path):
    run = tmp_path / "killed"
    assert _crash_after_claiming(run, kill=True) == -9
    assert [p.name for p in run.iterdir()] == [rundir.MARKER]  # SIGKILL: nothing ran after
    assert rundir.claim(run) == run  # nothing in it to keep: no --overwrite needed


def test_a_file_written_when_the_marker_cannot_take_its_name_is_still_written(
    tmp_path, monkeypatch
):
    """A full disk can refuse the marker's one more line after the file itself was written:
    the file stands and its write succeeds (an earlier run called its written result lost)."""
    import errno
    import json

    from loadtest.core import atomic

    run = rundir.claim(tmp_path / "run")
    real_write = rundir.os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rundir.os, "write", full)
    atomic.write_json(run / "metrics.json", {"status": "ok"})
    monkeypatch.setattr(rundir.os, "write", real_write)
    assert json.loads((run / "metrics.json").read_text()) == {"status": "ok"}
