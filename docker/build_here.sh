#!/usr/bin/env bash
# Build docker/Dockerfile and run the image on a machine where no container registry can be
# reached (this project's own): the base is a Debian rootfs made by mmdebstrap from Debian's
# packages and imported into podman; the torch the base lacks is the CPU build pip finds on
# this machine (PIP_FIND_LINKS). Then the image runs the README's main job and a served run
# (--url) against the fast test server on the host.
#
#     bash docker/build_here.sh    # as root, in the venv of the README (the test server needs
#                                  # aiohttp); about 10 minutes, most of it the rootfs and pip
#     bash docker/build_here.sh --light
#         # CI's: the light client (EXTRAS=http: no torch), its mock server in one container
#         # and a run against it in another, every setting from LOADTEST_* variables
#
# Users build the same Dockerfile the usual way (docker/README.md); nothing here is needed for it.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /var/tmp/loadtest-image.XXXXXX)"
mode="${1:-full}"
server=""
mock=""
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null
    [ -n "$mock" ] && "${podman[@]}" rm -f "$mock" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
step() { echo "--- image: $*"; }
for tool in podman mmdebstrap runc; do
    command -v "$tool" >/dev/null || { apt-get update -qq && apt-get install -y -qq podman buildah mmdebstrap runc uidmap >/dev/null; break; }
done
# vfs storage and runc: no overlay mounts or systemd in this sandbox
podman=(podman --storage-driver vfs --runtime runc --cgroup-manager cgroupfs --events-backend file)
links="${PIP_FIND_LINKS:-/opt/wheels}"
# podman's default limits are over what this sandbox lets a process set (runc fails with
# "error setting rlimit ... operation not permitted"): lowered ones
limits=(--ulimit nproc=4096:4096 --ulimit nofile=4096:4096)

step "a Debian rootfs with Python (mmdebstrap), imported as the base"
# the base trusts what this machine trusts (its package registries may be reached through a
# TLS proxy with a CA of its own), and pip there is told so
mmdebstrap --quiet --variant=apt --include=python3,python3-pip,python3-venv,ca-certificates \
    --customize-hook='copy-in /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs' \
    --customize-hook='printf "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n" > "$1/etc/pip.conf"' \
    bookworm "$work/rootfs.tar"
"${podman[@]}" import -q "$work/rootfs.tar" localhost/loadtest-base:bookworm >/dev/null

free_port() {
    "${PYTHON:-python3}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

if [ "$mode" = --light ]; then
    step "docker/Dockerfile on that base, the light client (EXTRAS=http)"
    "${podman[@]}" build -q --network host "${limits[@]}" \
        --build-arg BASE=localhost/loadtest-base:bookworm --build-arg EXTRAS=http \
        -f "$repo/docker/Dockerfile" -t localhost/loadtest:light "$repo" >/dev/null
    run=("${podman[@]}" run --rm --network host "${limits[@]}")
    "${run[@]}" localhost/loadtest:light --version
    step "its mock server in one container, a run against it in another, set from LOADTEST_*"
    port="$(free_port)"
    mock="$("${podman[@]}" run -d --network host "${limits[@]}" localhost/loadtest:light \
        mock-server --port "$port")"
    for _ in $(seq 60); do  # up within a minute, or the check fails below
        "${PYTHON:-python3}" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/v1/models', timeout=1)" 2>/dev/null && break
        sleep 1
    done
    mkdir -p "$work/out"
    code=0
    "${run[@]}" -v "$work/out:/work" \
        -e LOADTEST_URL="http://127.0.0.1:$port" -e LOADTEST_RATE=20 -e LOADTEST_CONCURRENCY=4 \
        -e LOADTEST_REQUESTS=40 -e LOADTEST_OUTPUT_TOKENS=16 -e LOADTEST_QUIET=1 \
        localhost/loadtest:light 2>"$work/run.log" || code=$?
    cat "$work/run.log"
    # 3: an invalid run (a busy machine's late client) is a result
    { [ "$code" = 0 ] || [ "$code" = 3 ]; } || { echo "image: the run exited $code"; exit 1; }
    grep -q "from the environment: LOADTEST_URL (--url)" "$work/run.log"
    "${PYTHON:-python3}" - "$work/out/reports" <<'PY'
import json, pathlib, sys
(metrics,) = pathlib.Path(sys.argv[1]).glob("*/metrics.json")
m = json.loads(metrics.read_text())
load = m["scenario"]["load"]
assert (load["arrival"], load["max_in_flight"]) == ({"kind": "poisson", "rate": 20.0}, 4), load
assert m["requests"]["completed"] == 40, m["requests"]
print(f"--- image: {metrics.parent.name}: {m['status']}, 40 requests, slot_wait p99 "
      f"{m['latency_ms']['slot_wait']['p99']} ms")
PY
    echo "--- image: built and ran (light)"
    exit 0
fi

step "docker/Dockerfile on that base, torch the CPU build from $links"
"${podman[@]}" build -q --network host "${limits[@]}" -v "$links:$links:ro" \
    --build-arg BASE=localhost/loadtest-base:bookworm \
    --build-arg TORCH="--find-links $links torch==${TORCH_VERSION:-2.13.0}" \
    -f "$repo/docker/Dockerfile" -t localhost/loadtest:here "$repo"

step "the image runs the README's main job"
mkdir -p "$work/out"
run=("${podman[@]}" run --rm --network host "${limits[@]}" -v "$work/out:/work"
     -v "$repo/scenarios:/scenarios:ro" localhost/loadtest:here)
"${run[@]}" --version
"${run[@]}" run /scenarios/chat.yml -q --out /work/chat
[ -s "$work/out/chat/metrics.json" ] && [ -s "$work/out/chat/report.html" ]

step "and a served run against the fast test server on the host"
port="$(free_port)"
"${PYTHON:-python3}" "$repo/tests/fast_openai_server.py" --port "$port" --itl-ms 2 >"$work/server.log" 2>&1 &
server=$!
sleep 2
"${run[@]}" run --url "http://127.0.0.1:$port/v1" --rate 10 --duration 5s -q --out /work/served \
    || [ $? = 3 ]  # an invalid run (a busy machine's late client) is a result
[ -s "$work/out/served/metrics.json" ]
echo "--- image: built and ran"
