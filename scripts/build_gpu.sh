#!/usr/bin/env bash
# Builds the GPU test and benchmark binaries (nvcc from /usr/local/cuda, sm_90 + PTX) and
# collects them, with run.sh, in a folder that can be carried to a GPU machine:
#
#   scripts/build_gpu.sh [OUT_DIR]          # default OUT_DIR: .gpu (git-ignored)
#   ... copy OUT_DIR to the GPU machine ...
#   bash OUT_DIR/run.sh [RESULTS_DIR]       # tests, then benchmarks; logs + JSON in RESULTS_DIR
#
# Environment: BUILD_DIR (default build-gpu), JOBS (default 2), CARRY_NCCL=0 to leave
# libnccl.so.2 (about 210 MB) behind when the GPU machine has its own NCCL 2.x (the lent
# GPU machines have it in the Python package nvidia-nccl-cu13, which run.sh finds),
# KEEP_CUDA_OBJECTS=1 to reuse CUDA objects when only .cu files changed.
# cudart is linked statically; the binaries need libcuda.so (the driver) and libnccl.so.2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/.gpu}
build=${BUILD_DIR:-$root/build-gpu}
jobs=${JOBS:-2}
export PATH=/usr/local/cuda/bin:$PATH

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$root" -Dcuda=enabled -Dtests=enabled -Dbuildtype=release
fi
targets=(tests/gpu/tcoll_gpu_tests tests/gpu/tcoll_gpu_sparse_tests tests/gpu/tcoll_gpu_schedule_tests
         tests/gpu/gpu_mixed_precision_cpu
         bench/gpu/reduce_perf bench/gpu/allreduce_perf_gpu)
if grep -q tcoll_gpu_nccl_tests "$build/build.ninja"; then # only when NCCL was found
  targets+=(tests/gpu/tcoll_gpu_nccl_tests)
fi
if grep -q tcoll_gpu_cublas_tests "$build/build.ninja"; then # only when cuBLAS was found
  targets+=(tests/gpu/tcoll_gpu_cublas_tests)
fi
# Meson 1.0 passes nvcc no -MD/-MF, so ninja records no header dependencies for CUDA objects
# (`ninja -t deps` shows 0): a changed header would not rebuild them. Always recompile them,
# unless KEEP_CUDA_OBJECTS=1 says no header changed since the last build.
[ "${KEEP_CUDA_OBJECTS:-0}" = 1 ] || find "$build" -name '*.cu.o' -delete
ninja -C "$build" -j "$jobs" "${targets[@]}"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for t in "${targets[@]}"; do cp "$build/$t" "$out/bin/"; done
cp "$root/scripts/run_gpu_suite.sh" "$out/run.sh"
cp "$root/scripts/gpu_capture_ab.sh" "$out/capture_ab.sh"
chmod +x "$out/run.sh" "$out/capture_ab.sh"

# Shared libraries the binaries need beyond glibc/libstdc++ and the driver.
nccl=$(ldd "$out/bin/allreduce_perf_gpu" | awk '/libnccl/ {print $3}')
if [ "${CARRY_NCCL:-1}" = 1 ] && [ -n "$nccl" ]; then
  cp -L "$nccl" "$out/lib/"
fi
echo "== shared libraries of the collected binaries =="
for b in "$out"/bin/*; do
  echo "$(basename "$b"): $(ldd "$b" | awk '{print $1}' | grep -v -E '^(linux-vdso|/lib64/ld-linux)' | tr '\n' ' ')"
done
(cd "$out" && git -C "$root" rev-parse HEAD > VERSION 2>/dev/null || true)
du -sh "$out"
echo "collected in $out; run there with: bash $out/run.sh [RESULTS_DIR]"
