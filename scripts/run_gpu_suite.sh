#!/usr/bin/env bash
# Runs the GPU suite, then the GPU benchmarks, writing logs and JSON to RESULTS_DIR.
# Works from a folder made by scripts/build_gpu.sh (as its run.sh: binaries in bin/, NCCL in
# lib/) or from the repository (binaries taken from build-gpu/).
#
#   bash run.sh [RESULTS_DIR]      QUICK=1 for a short benchmark sweep (1M..64M)
#
# Exit status: 0 when every test passed (or skipped for lack of a GPU) and every benchmark
# checked its results bit-exactly; 1 otherwise.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -d "$here/bin" ]; then
  bin=$here/bin
  export LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  b=${BUILD_DIR:-$here/../build-gpu}
  bin=$(mktemp -d)
  for f in tests/gpu/tcoll_gpu_tests tests/gpu/tcoll_gpu_nccl_tests tests/gpu/tcoll_gpu_cublas_tests \
           tests/gpu/tcoll_gpu_sparse_tests tests/gpu/gpu_mixed_precision_cpu \
           bench/gpu/reduce_perf bench/gpu/allreduce_perf_gpu; do
    [ -x "$b/$f" ] && ln -s "$(cd "$(dirname "$b/$f")" && pwd)/$(basename "$f")" "$bin/"
  done
fi
# cuBLAS (the SFB test) and NCCL from the machine's Python wheels (nvidia-cublas,
# nvidia-nccl-cu13) when the system has none; carried libraries in lib/ come first.
nvidia_root=$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
if [ -n "$nvidia_root" ]; then
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    f=$(find "$nvidia_root" -name "$lib" 2>/dev/null | head -n 1)
    [ -n "$f" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(dirname "$f")
  done
fi
results=${1:-$here/results}
mkdir -p "$results"
max=1G
[ "${QUICK:-0}" = 1 ] && max=64M
status=0
summary=()

(nvidia-smi || echo "nvidia-smi not available") > "$results/nvidia-smi.txt" 2>&1

# run NAME LOG CMD...: 0 pass, 77 skip, else fail
run() {
  local name=$1 log=$2
  shift 2
  if [ ! -x "$1" ]; then
    summary+=("MISSING $name")
    return
  fi
  if ldd "$1" | grep -q "not found"; then
    summary+=("SKIP    $name (missing shared library: $(ldd "$1" | grep 'not found' | awk '{print $1}' | tr '\n' ' '))")
    return
  fi
  echo "=== $name: $*" | tee "$results/$log"
  local start=$SECONDS
  "$@" 2>&1 | tee -a "$results/$log"
  local rc=${PIPESTATUS[0]}
  local took=$((SECONDS - start))
  case $rc in
    0) summary+=("PASS    $name (${took}s)") ;;
    77) summary+=("SKIP    $name: $(grep -m1 '^SKIP' "$results/$log")") ;;
    *) summary+=("FAIL    $name (exit $rc, ${took}s)"); status=1 ;;
  esac
}

# tests
run gpu_mixed_precision_cpu test_mixed_precision_cpu.log "$bin/gpu_mixed_precision_cpu"
run tcoll_gpu_tests test_gpu.log "$bin/tcoll_gpu_tests" --duration=true
run tcoll_gpu_sparse_tests test_sparse_cuda.log "$bin/tcoll_gpu_sparse_tests" --duration=true
run tcoll_gpu_nccl_tests test_nccl.log "$bin/tcoll_gpu_nccl_tests"
run tcoll_gpu_cublas_tests test_sfb_cublas.log "$bin/tcoll_gpu_cublas_tests"

# benchmarks (docs/benchmarks.md and docs/gpu.md explain the columns and the goals)
run reduce_perf reduce_perf.log "$bin/reduce_perf" -b 1M -e "$max" -n 20 -w 5 \
  --json "$results/reduce_perf.json"
for d in float half bfloat16; do
  run "allreduce_perf device_team ring $d" "allreduce_device_team_ring_$d.log" \
    "$bin/allreduce_perf_gpu" -t device_team -g 8 -a ring -b 1M -e "$max" -d "$d" -n 20 -w 5 \
    --json "$results/allreduce_device_team_ring_$d.json"
done
for a in recursive_halving_doubling binomial_tree; do
  run "allreduce_perf device_team $a float" "allreduce_device_team_$a.log" \
    "$bin/allreduce_perf_gpu" -t device_team -g 8 -a "$a" -b 1M -e 256M -d float -n 10 -w 3 \
    --json "$results/allreduce_device_team_$a.json"
done
for a in passthrough ring; do
  run "allreduce_perf nccl $a float" "allreduce_nccl_$a.log" \
    "$bin/allreduce_perf_gpu" -t nccl -a "$a" -b 1M -e "$max" -d float -o avg -n 20 -w 5 \
    --json "$results/allreduce_nccl_$a.json"
done

echo
echo "== summary (results in $results) =="
printf '%s\n' "${summary[@]}" | tee "$results/summary.txt"
exit $status
