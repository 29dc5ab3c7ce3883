#!/usr/bin/env bash
# The four-GPU machine's calls (device.run, ten minutes each), run one after the other on one
# warm machine; each writes its logs and multi_gpu.json under $OUT. The table of all three:
#   python bench/multi_gpu.py --table call1/b70tp2.json call2/four.json call3/replicas.json call3/tp4.json
#
#   bash bench/multi_gpu_calls.sh 1   # tests on GPUs 0-1 beside the 70B at TP=2 on GPUs 2-3
#   bash bench/multi_gpu_calls.sh 2   # four-GPU tests, the 70B at TP=4, two replicas of TP=2
#   bash bench/multi_gpu_calls.sh 3   # two replicas against one GPU (0-1 alone), the 8B at TP=4
set -u
: "${OUT:?set OUT to the folder whose files come back}"
export PYTHONUNBUFFERED=1
work=$(mktemp -d)  # run folders stay here; only the logs and tables travel back
half=$(($(nproc) / 2))  # the two concurrent halves of phase 1 on CPUs of their own

bench() {  # bench NAME TIMEOUT ARGS...: one bench/multi_gpu.py call, its table copied to $OUT
  local name=$1 limit=$2
  shift 2
  timeout "$limit" python3 bench/multi_gpu.py --out "$work/$name" "$@" >"$OUT/$name.log" 2>&1
  echo "rc=$?" >>"$OUT/$name.log"
  cp "$work/$name/multi_gpu.json" "$OUT/$name.json" 2>/dev/null
}

gpu_tests() {  # gpu_tests NAME TIMEOUT -k EXPR
  local name=$1 limit=$2
  shift 2
  timeout "$limit" python3 -m pytest -m gpu tests -p no:cacheprovider -q -rs --durations=12 \
    "$@" >"$OUT/$name.log" 2>&1
  echo "rc=$?" >>"$OUT/$name.log"
}

case ${1:?phase 1, 2 or 3} in
1)
  nvidia-smi topo -m >"$OUT/machine.txt" 2>&1
  nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm,memory.total --format=csv \
    >>"$OUT/machine.txt" 2>&1
  CUDA_VISIBLE_DEVICES=0,1 taskset -c "0-$((half - 1))" \
    bash -c "$(declare -f gpu_tests); OUT=$OUT gpu_tests tests2 560 \
    -k 'not tp4_compiled and not replicas_of_tp2'" &
  CUDA_VISIBLE_DEVICES=2,3 taskset -c "$half-$((2 * half - 1))" \
    bash -c "$(declare -f bench); OUT=$OUT work=$work bench b70tp2 560 --only tp70b \
    --tp70b-sizes 2" &
  wait
  ;;
2)
  gpu_tests tests4 150 -k 'tp4_compiled or replicas_of_tp2'
  bench four 420 --only tp70b,replicas-of-tp2 --tp70b-sizes 4
  ;;
3)
  CUDA_VISIBLE_DEVICES=0,1 bench replicas 330 --only replicas-compiled
  bench tp4 120 --only tp4-8b
  ;;
esac
