#!/usr/bin/env bash
# A/B of the device_team graph-capture fix (docs/gpu.md, "Fourth job") on a GPU machine: the
# capture test at P = 8 (ring, then recursive doubling) with a binary built before the fix
# (bin/tcoll_gpu_tests_before, copy it in yourself) and with this one, each case in its own
# process, printing the exit code and how many address ranges the recursive-doubling graph's
# allocations occupy (cudaGraphDebugDotPrint). Run from a folder made by scripts/build_gpu.sh:
#
#   bash gpu_capture_ab.sh [RESULTS_DIR]
cd "$(dirname "$0")"
o=${1:-capture_ab}
mkdir -p "$o"
run() {
  local name=$1 bin=$2
  shift 2
  [ -x "$bin" ] || { echo "skip $name: no $bin"; return; }
  mkdir -p "$o/$name"
  echo "=== $name: $bin $*" >> "$o/exp.log"
  env "$@" TCOLL_CAPTURE_DOT="$o/$name" timeout 60 "$bin" -tc='*CUDA graph*' >> "$o/exp.log" 2>&1
  local rc=$?
  local ranges
  ranges=$(grep -ho 'dptr} | {[0-9]* | 0x[0-9A-F]*' "$o/$name/recursive_doubling_P8.dot" 2>/dev/null |
           sed 's/.*0x//' | cut -c1-10 | sort -u | wc -l)
  echo "rc=$rc rd_P8_address_ranges=$ranges $name" | tee -a "$o/exp.log"
}
for i in 1 2 3; do run before_$i bin/tcoll_gpu_tests_before TCOLL_CAPTURE_P=8; done
for i in 1 2 3; do run after_$i bin/tcoll_gpu_tests TCOLL_CAPTURE_P=8; done
run after_reverse bin/tcoll_gpu_tests TCOLL_CAPTURE_P=8 TCOLL_CAPTURE_REVERSE=1
run after_sweep1 bin/tcoll_gpu_tests X=1
run after_sweep2 bin/tcoll_gpu_tests X=1
run prepared_sweep bin/tcoll_gpu_tests TCOLL_CAPTURE_PREPARED=1
