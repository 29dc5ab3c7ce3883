"""``load.ray``: workers as actors on a Ray cluster of several nodes (Ray's own test cluster, on
this host), one of whose nodes plays a host whose monotonic clock is 5 s ahead."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from loadtest.config.loading import load_scenario
from loadtest.execution.ray_workers import FAKE_SKEW_ENV
from loadtest.session import run_scenario
from tests.conftest import LENIENT, write_scenario

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

SKEW_NS = 5_000_000_000
NODE = {"object_store_memory": 80 * 2**20}


@pytest.fixture(scope="module")
def cluster():
    """A head and two worker nodes; the last node's clock reads 5 s ahead."""
    c = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, **NODE}
    )
    c.add_node(num_cpus=2, **NODE)
    c.add_node(num_cpus=2, env_vars={FAKE_SKEW_ENV: str(SKEW_NS)}, **NODE)
    c.wait_for_nodes()
    yield c
    c.shutdown()


def scenario(tmp_path, address: str, load: dict, name="s.yml", **more):
    return write_scenario(
        tmp_path,
        {
            "name": "ray",
            # the actors' start (a Python process each, on a busy machine) is inside it
            "backend": {"kind": "noop", "start_timeout": "3m"},
            "workload": {"input_tokens": 8, "output_tokens": 4},
            "load": {**load, "workers": 3, "ray": address, "validity": LENIENT},
            "telemetry": {"gpu": False},
            **more,
        },
        name,
    )


def test_actors_on_several_nodes_send_the_plan_on_one_timeline(tmp_path, cluster):
    load = {"arrival": {"kind": "poisson", "rate": 150}, "duration": "2s", "warmup": "0.5s"}
    path = scenario(tmp_path, cluster.address, load, outputs={"requests_jsonl": True})
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "ok" and m["validity"]["valid"], m["validity"]
    workers = m["workers"]
    assert len({w["node"] for w in workers}) >= 2  # spread over the nodes
    assert sum(w["sent"] for w in workers) == m["requests"]["sent"] == m["requests"]["planned"]
    for w in workers:  # each measured its node's clock: 5 s ahead on the skewed node, else 0
        offset, bound = w["clock"]["offset_ms"], w["clock"]["uncertainty_ms"]
        assert any(abs(offset - truth) <= bound + 0.001 for truth in (0.0, SKEW_NS / 1e6)), w
        assert w["clock"]["method"] == "udp" and w["clock"]["drift_ms"] is not None
    assert any(w["clock"]["offset_ms"] > 4000 for w in workers)  # the skewed node took part
    # every request went out on the coordinator's timeline: intended times are the plan's
    # offsets, and none was sent seconds early or late (it would be, 5 s off, uncorrected)
    records = [json.loads(line) for line in (tmp_path / "run" / "requests.jsonl").open()]
    assert len(records) == m["requests"]["planned"]
    assert max(abs(r["sent_ns"] - r["intended_ns"]) for r in records) < 1_000_000_000
    assert m["latency_ms"]["dispatch_lag"]["max"] < 1000
    assert m["window"]["length_s"] == 2.0
    assert m["backend"]["ray"]["nodes"] == 3 and m["backend"]["workers"] == 3


def test_a_killed_actor_fails_the_run_and_the_others_results_are_kept(tmp_path, cluster):
    load = {"arrival": {"kind": "poisson", "rate": 100}, "duration": "30s"}
    loaded = load_scenario(scenario(tmp_path, cluster.address, load))

    def kill_one():  # an actor's process dies mid-run (its node lost, say)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pids = _actor_pids()
            if len(pids) == 3:
                time.sleep(3.0)  # all running by now
                os.kill(pids[0], signal.SIGKILL)
                return
            time.sleep(0.2)

    threading.Thread(target=kill_one, daemon=True).start()
    started = time.monotonic()
    m = run_scenario(loaded, tmp_path / "run").metrics
    assert time.monotonic() - started < 28  # ended early, not after the planned 30 s
    assert m["status"] == "failed" and "was lost" in m["harness"]["failure"]
    statuses = sorted(w["status"] for w in m["workers"])
    assert statuses == ["failed", "failed", "lost"]
    kept = [w for w in m["workers"] if w["status"] == "failed"]
    assert m["requests"]["completed"] == sum(w["completed"] for w in kept) > 100


def test_a_cluster_that_cannot_be_reached_fails_the_start_with_the_reason(tmp_path):
    load = {"arrival": {"kind": "poisson", "rate": 10}, "duration": "1s"}
    path = scenario(tmp_path, "127.0.0.1:1", load)  # nothing listens there
    started = time.monotonic()
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "failed"
    assert "Ray cluster 127.0.0.1:1: cannot connect" in m["backend"]["error"]
    assert time.monotonic() - started < 120


def _actor_pids() -> list[int]:
    """The worker actors' processes (Ray titles them ``ray::RayWorker...``)."""
    out = subprocess.run(["pgrep", "-f", "ray::RayWorker"], capture_output=True, text=True)
    return sorted(int(p) for p in out.stdout.split())


def _descendants(pid: int) -> dict[int, str]:
    """Every live process under ``pid``, with its command line."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                try:
                    found[child] = open(f"/proc/{child}/cmdline").read().replace("\0", " ")
                except OSError:
                    continue
                frontier.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigterms_to_a_run_on_a_local_ray_write_the_partial_result_and_leave_nothing(tmp_path):
    """``--ray local`` then SIGTERMs until it ends: Ray's own handlers (installed by ray.init
    and, at C level, taken back to the default by ray.shutdown) once killed the run, with no
    metrics.json or exit -15. The session's handlers stand throughout: the partial result is
    written, Ray is shut down, the exit is 143."""
    import sys

    path = write_scenario(
        tmp_path,
        {
            "name": "ray-local",
            "backend": {"kind": "noop", "start_timeout": "3m"},  # Ray's own start is inside
            "workload": {"input_tokens": 8, "output_tokens": 4},
            "load": {"arrival": {"kind": "poisson", "rate": 50}, "duration": "5m",
                     "workers": 2, "ray": "local", "validity": LENIENT},
            "telemetry": {"gpu": False},
        },
    )  # fmt: skip
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadtest", "run", str(path), "-o", str(out), "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            under = _descendants(proc.pid)
            if sum("ray::RayWorker" in cmd for cmd in under.values()) == 2:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the workers never started: {proc.communicate(timeout=30)}")
        time.sleep(2.0)  # the run under way
        under = _descendants(proc.pid)
        # SIGTERMs every 0.1 s until it exits: one lands in every step of the stop, Ray's
        # shutdown included (which once set SIGTERM back to the default under the handler)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.1)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "interrupted" and m["interrupted_by"] == "SIGTERM"
    assert m["requests"]["completed"] > 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(p) for p in under):
        time.sleep(0.5)
    assert not [cmd[:80] for p, cmd in under.items() if _alive(p)]


def test_more_workers_than_a_local_ray_has_cpus_is_said_at_once(tmp_path):
    load = {"arrival": {"kind": "poisson", "rate": 10}, "duration": "1s"}
    path = write_scenario(
        tmp_path,
        {
            "name": "ray-local",
            "backend": {"kind": "noop", "start_timeout": "3m"},
            "workload": {"input_tokens": 8, "output_tokens": 4},
            "load": {**load, "workers": os.cpu_count() + 1, "ray": "local"},
            "telemetry": {"gpu": False},
        },
    )
    started = time.monotonic()
    m = run_scenario(load_scenario(path), tmp_path / "run").metrics
    assert m["status"] == "failed"
    assert f"Ray (local) has {os.cpu_count()} CPUs on this host" in m["backend"]["error"]
    assert time.monotonic() - started < 90  # not the 3 minutes of the start's limit
