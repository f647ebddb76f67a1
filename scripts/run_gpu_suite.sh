#!/usr/bin/env bash
# Runs the GPU suite, then the GPU benchmarks, then compute-sanitizer on the tests that touch
# raw kernels, writing one log per step and JSON for every benchmark to RESULTS_DIR.
# Works from a folder made by scripts/build_gpu.sh (as its run.sh: binaries in bin/, NCCL in
# lib/) or from the repository (binaries taken from build-gpu/).
#
#   bash run.sh [RESULTS_DIR]
#
# Environment:
#   BUDGET_S=N     stop starting steps once N seconds have passed (each step is also cut to
#                  what is left, so the whole run fits a lease); unset: no budget
#   QUICK=1        a short benchmark sweep (1M..64M)
#   STAGES="tests bench latency sanitize"   which stages, in this order (default: all four)
#
# A step cut by its time limit is reported as TIMEOUT; steps never started as NOT RUN.
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
           tests/gpu/tcoll_gpu_sparse_tests tests/gpu/tcoll_gpu_schedule_tests \
           tests/gpu/gpu_mixed_precision_cpu bench/gpu/reduce_perf bench/gpu/allreduce_perf_gpu; do
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
stages=${STAGES:-tests bench latency sanitize}
budget=${BUDGET_S:-0}
status=0
summary=()
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)

{
  nvidia-smi || echo "nvidia-smi not available"
  echo "compute-sanitizer: ${sanitizer:-not found}"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' 2>&1 || true
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
} > "$results/nvidia-smi.txt" 2>&1

# run NAME LOG LIMIT_S CMD...: 0 pass, 77 skip, 124/137 timeout, else fail
run() {
  local name=$1 log=$2 limit=$3
  shift 3
  if [ ! -x "$1" ]; then
    summary+=("MISSING $name")
    return
  fi
  if [ "$budget" -gt 0 ]; then
    local left=$((budget - SECONDS))
    if [ "$left" -lt 5 ]; then
      summary+=("NOT RUN $name (budget spent)")
      return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
  fi
  if ldd "$1" | grep -q "not found"; then
    summary+=("SKIP    $name (missing shared library: $(ldd "$1" | grep 'not found' | awk '{print $1}' | tr '\n' ' '))")
    return
  fi
  echo "=== $name (limit ${limit}s): $*" | tee -a "$results/$log"
  local start=$SECONDS
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$results/$log"
  local rc=${PIPESTATUS[0]}
  local took=$((SECONDS - start))
  case $rc in
    0) summary+=("PASS    $name (${took}s)") ;;
    77) summary+=("SKIP    $name: $(grep -m1 '^SKIP' "$results/$log")") ;;
    124|137) summary+=("TIMEOUT $name (cut at ${limit}s)"); status=1 ;;
    *) summary+=("FAIL    $name (exit $rc, ${took}s)"); status=1 ;;
  esac
}

has_stage() { [[ " $stages " == *" $1 "* ]]; }

if has_stage tests; then
  # reducers first, then what was never run before: sparse kernels, the device pool and the
  # overlap scheduler, SFB with cuBLAS and the device-only SFB path; NCCL at one rank last
  run gpu_mixed_precision_cpu test_mixed_precision_cpu.log 60 "$bin/gpu_mixed_precision_cpu"
  # the graph-capture case runs in a process of its own: a device fault there leaves the
  # CUDA context unusable, and every later case of the same process would fail with it
  run tcoll_gpu_tests test_gpu.log 180 "$bin/tcoll_gpu_tests" --duration=true -tce='*CUDA graph*'
  run "tcoll_gpu_tests (graph capture)" test_gpu_capture.log 60 "$bin/tcoll_gpu_tests" \
    --duration=true -tc='*CUDA graph*'
  run tcoll_gpu_sparse_tests test_sparse_cuda.log 60 "$bin/tcoll_gpu_sparse_tests" --duration=true
  run tcoll_gpu_schedule_tests test_schedule_cuda.log 60 "$bin/tcoll_gpu_schedule_tests" --duration=true
  run tcoll_gpu_cublas_tests test_sfb_cublas.log 60 "$bin/tcoll_gpu_cublas_tests" --duration=true
  run tcoll_gpu_nccl_tests test_nccl.log 60 "$bin/tcoll_gpu_nccl_tests" --duration=true
fi

# benchmarks (docs/benchmarks.md and docs/gpu.md explain the columns and the goals)
if has_stage bench; then
  run reduce_perf reduce_perf.log 90 "$bin/reduce_perf" -b 1M -e "$max" -n 20 -w 5 \
    --json "$results/reduce_perf.json"
  for P in 2 4 8; do
    run "allreduce_perf device_team ring float P=$P" allreduce_device_team.log 60 \
      "$bin/allreduce_perf_gpu" -t device_team -g "$P" -a ring -b 1M -e "$max" -d float -n 20 -w 5 \
      --json "$results/allreduce_device_team_ring_float_P$P.json"
  done
  for d in half bfloat16; do
    run "allreduce_perf device_team ring $d P=8" allreduce_device_team.log 45 \
      "$bin/allreduce_perf_gpu" -t device_team -g 8 -a ring -b 1M -e 256M -d "$d" -n 20 -w 5 \
      --json "$results/allreduce_device_team_ring_${d}_P8.json"
  done
  for a in recursive_halving_doubling binomial_tree; do
    run "allreduce_perf device_team $a float P=8" allreduce_device_team.log 45 \
      "$bin/allreduce_perf_gpu" -t device_team -g 8 -a "$a" -b 1M -e 256M -d float -n 10 -w 3 \
      --json "$results/allreduce_device_team_${a}_P8.json"
  done
  for a in passthrough ring; do
    run "allreduce_perf nccl $a float" allreduce_nccl.log 45 \
      "$bin/allreduce_perf_gpu" -t nccl -a "$a" -b 1M -e "$max" -d float -o sum -n 20 -w 5 \
      --json "$results/allreduce_nccl_$a.json"
  done
fi

# small-message latency of device_team allreduce (the stream-ordering work is measured here)
if has_stage latency; then
  for P in 2 4 8; do
    for a in ring recursive_doubling; do
      run "latency device_team $a P=$P" latency_device_team.log 40 \
        "$bin/allreduce_perf_gpu" -t device_team -g "$P" -a "$a" -b 8 -e 64K -f 2 -d float \
        -n 200 -w 20 --json "$results/latency_device_team_${a}_P$P.json"
    done
  done
fi

# compute-sanitizer on the tests that launch tcoll's own kernels, small cases only
if has_stage sanitize; then
  if [ -z "$sanitizer" ]; then
    summary+=("SKIP    compute-sanitizer (not found)")
  else
    kernels='*reducer: every op*,fused*,convert*,mixed precision*,device_team transport*'
    for tool in memcheck racecheck; do
      run "$tool tcoll_gpu_tests (reducer kernels)" "sanitize_$tool.log" 90 \
        "$sanitizer" --tool "$tool" --error-exitcode 9 "$bin/tcoll_gpu_tests" -tc="$kernels"
      run "$tool tcoll_gpu_sparse_tests (chunk kernels)" "sanitize_$tool.log" 60 \
        "$sanitizer" --tool "$tool" --error-exitcode 9 "$bin/tcoll_gpu_sparse_tests" \
        -tc='cuda_chunk_ops*'
    done
    # the data-movement collectives of the table on device memory (own-block copies,
    # in-place scratch, Bruck's staging, the barrier's device tokens), cuda reducer
    run "memcheck tcoll_gpu_tests (alltoall, gather, scatter, barrier)" sanitize_memcheck.log 120 \
      "$sanitizer" --tool memcheck --error-exitcode 9 "$bin/tcoll_gpu_tests" \
      -tc='device_team+cuda: alltoall(v)*'
    run "memcheck tcoll_gpu_schedule_tests" sanitize_memcheck.log 60 \
      "$sanitizer" --tool memcheck --error-exitcode 9 "$bin/tcoll_gpu_schedule_tests"
    run "memcheck tcoll_gpu_tests (graph capture)" sanitize_memcheck.log 60 \
      "$sanitizer" --tool memcheck --error-exitcode 9 "$bin/tcoll_gpu_tests" \
      -tc='*CUDA graph*'
    # NCCL's own initialisation probes kernels of other architectures (error 209 from
    # cudaFuncGetAttributes, 32 of them with NCCL 2.28.9): report memory errors only
    run "memcheck tcoll_gpu_nccl_tests" sanitize_memcheck.log 60 \
      "$sanitizer" --tool memcheck --report-api-errors no --error-exitcode 9 \
      "$bin/tcoll_gpu_nccl_tests"
  fi
fi

echo
echo "== summary (results in $results, ${SECONDS}s) =="
printf '%s\n' "${summary[@]}" | tee "$results/summary.txt"
exit $status
