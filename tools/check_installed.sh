#!/usr/bin/env bash
# The package as users install it, not as the checkout runs it: build the sdist and the wheel,
# check their metadata, install the wheel into a clean virtual environment and run, from a
# directory outside the checkout (so nothing of the checkout is on sys.path):
#   --version; validate of every shipped scenario; the simulator; a served run (--url) against
#   the fast test server; a sweep; report of a result; a local-model scenario refused with the
#   extra it needs; --otel refused without its extra, then with it a traced run's spans and
#   metrics received by an OTLP receiver; then the transformers extra installed and the
#   README's main job; then
#   pipx and uv tool installs of the wheel, each running the main job.
# CI runs it (.ci/run); by hand: bash tools/check_installed.sh   (about 6 minutes)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
step() { echo "--- installed: $*"; }

step "build the sdist and the wheel, check their metadata"
"$python" -m build --outdir "$work/dist" "$repo" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$python" -m twine check --strict "$work"/dist/*
wheel="$(ls "$work"/dist/*.whl)"

step "a clean virtual environment, the wheel alone (no extras), installed by its name"
"$python" -m venv "$work/venv"
version="$(basename "$wheel" | cut -d- -f2)"
# by its name, from the built wheel (a --find-links given replaces pip's configured ones: kept)
by_name=(--find-links "$work/dist" ${PIP_FIND_LINKS:+--find-links "$PIP_FIND_LINKS"})
"$work/venv/bin/pip" install -q "${by_name[@]}" "llm-loadtest==$version"
lt="$work/venv/bin/loadtest"
mkdir "$work/user" && cd "$work/user"  # outside the checkout
"$work/venv/bin/python" -c "import loadtest, sys; assert '$repo' not in loadtest.__file__, loadtest.__file__"
"$lt" --version
"$lt" validate "$repo"/scenarios/*.yml >/dev/null 2>"$work/validate.err" || true
# every scenario validates, except that a local model says which extra it needs
if grep -v "pip install 'llm-loadtest\[transformers\]'" "$work/validate.err" | grep -q .; then
    cat "$work/validate.err"; exit 1
fi
set +e; "$lt" run "$repo/scenarios/chat.yml" -q --out runs/no-extra 2>"$work/chat.err"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q "pip install 'llm-loadtest\[transformers\]'" "$work/chat.err" \
    || { echo "a local model without the extra: exit $rc"; cat "$work/chat.err"; exit 1; }

step "the simulator, a sweep, a served run, a report"
# exit 3 (an invalid run: a busy CI machine may make the client late) is a result; 4 and up are not
ok() { "$@" || [ $? = 3 ]; }
ok "$lt" run "$repo/scenarios/poisson-sla.yml" -q --out runs/sim --set load.duration=10s --set load.warmup=1s
ok "$lt" sweep "$repo/scenarios/poisson-sla.yml" -q --out runs/sweep --rates 5,10 --set load.duration=5s --set load.warmup=1s
port="$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$python" "$repo/tests/fast_openai_server.py" --port "$port" --itl-ms 2 >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do
    "$python" -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null && break
    sleep 0.1
done
ok "$lt" run --url "http://127.0.0.1:$port/v1" --rate 10 --duration 5s -q --out runs/served
ok "$lt" report runs/served >/dev/null  # it exits with the run's own verdict (3: invalid)
# a gate against a baseline in the light install: its t quantile is the project's own (no scipy)
"$work/venv/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('scipy') is not None)" \
    || { echo "scipy came with the light install"; exit 1; }
ok "$lt" run --url "http://127.0.0.1:$port" --rate 10 --duration 5s -q --out runs/served-again
"$lt" gate runs/served-again --baseline runs/served >/dev/null || [ $? -le 3 ]  # a verdict, not a crash
ok "$lt" plan "$repo/scenarios/poisson-sla.yml" --baseline runs/served >/dev/null
for f in runs/sim runs/sweep runs/served; do [ -s "$f/metrics.json" ] || [ -s "$f/sweep.json" ] || { echo "no result in $f"; exit 1; }; done
[ -s runs/served/report.html ]

step "the otel extra: refused without it, then a traced served run's spans reach a collector"
set +e; "$lt" run --url "http://127.0.0.1:$port/v1" --requests 5 --otel -q --out runs/no-otel 2>"$work/otel.err"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q "pip install 'llm-loadtest\[otel\]'" "$work/otel.err" \
    || { echo "--otel without the extra: exit $rc"; cat "$work/otel.err"; exit 1; }
"$work/venv/bin/pip" install -q "${by_name[@]}" "llm-loadtest[otel]==$version"
otlp_port="$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
(cd "$repo" && exec "$python" -m tests.otlp_receiver --port "$otlp_port" --tally "$work/otlp.json") &
receiver=$!
for _ in $(seq 100); do
    "$python" -c "import socket; socket.create_connection(('127.0.0.1', $otlp_port), 0.2)" 2>/dev/null && break
    sleep 0.1
done
OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$otlp_port" ok "$lt" run --url "http://127.0.0.1:$port/v1" \
    --requests 5 --otel -q --out runs/traced 2>"$work/traced.err"
kill "$receiver"
grep -q "OpenTelemetry: 5 request spans exported" "$work/traced.err" || { cat "$work/traced.err"; exit 1; }
"$python" -c "import json,sys; c=json.load(open('$work/otlp.json')); sys.exit(not (c['spans'].get('loadtest') == 5 and c['metrics']))" \
    || { echo "the collector's counts: $(cat "$work/otlp.json")"; exit 1; }

step "the transformers extra, and the README's main job"
"$work/venv/bin/pip" install -q "${by_name[@]}" "torch==${TORCH_VERSION:-2.13.0}" "llm-loadtest[transformers]==$version"
ok "$lt" run "$repo/scenarios/chat.yml" -q --out runs/chat
[ -s runs/chat/metrics.json ] && [ -s runs/chat/report.html ]
step "pipx and uv tool install, each running the README's main job"
"$python" -m venv "$work/tools"
"$work/tools/bin/pip" install -q pipx uv
torch="torch==${TORCH_VERSION:-2.13.0}"
PIPX_HOME="$work/pipx" PIPX_BIN_DIR="$work/pipx-bin" \
    "$work/tools/bin/pipx" install -q --pip-args="$torch" "$wheel[transformers]" >/dev/null
ok "$work/pipx-bin/loadtest" run "$repo/scenarios/chat.yml" -q --out runs/pipx >/dev/null
# uv reads no pip configuration: the local wheels pip finds (PIP_FIND_LINKS) are named to it
UV_TOOL_DIR="$work/uv" UV_TOOL_BIN_DIR="$work/uv-bin" "$work/tools/bin/uv" tool install -q \
    ${PIP_FIND_LINKS:+--find-links "$PIP_FIND_LINKS"} --with "$torch" "llm-loadtest[transformers] @ file://$wheel"
ok "$work/uv-bin/loadtest" run "$repo/scenarios/chat.yml" -q --out runs/uv >/dev/null
for f in runs/pipx runs/uv; do [ -s "$f/metrics.json" ] || { echo "no result in $f"; exit 1; }; done
echo "--- installed: every check passed"
