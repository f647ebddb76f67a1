#!/usr/bin/env bash
# Installs what is missing, builds everything (CUDA parts too when nvcc is present) and runs
# every test suite, the MPI, shared-memory and preload suites again against MPICH, then the
# in-process suites under ASan+UBSan and under TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_torch.sh # .venv with torch, and the tcoll torch.distributed backend
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
jobs=$(nproc)
status=0
# Where CI's minutes go (it must stay under 45 on 2 cores): one line per phase.
phase_start=$SECONDS
phase() { echo "test.sh: $1 took $((SECONDS - phase_start)) s (total $SECONDS s)"; phase_start=$SECONDS; }
run_suite() { # build-dir, then meson test arguments
  local dir=$1; shift
  meson test -C "$dir" --print-errorlogs --num-processes "$jobs" "$@" || status=1
}

# The sanitizer builds compile only the executables of these suites (not the benchmarks,
# planner or examples), which keeps the whole run under 45 minutes on 2 cores. The
# sanitizer builds have no MPI, so only the in-process parts of each suite run there.
asan_suites=(threads hier schedule sparse elastic hybrid)
tsan_suites=(threads hier schedule elastic hybrid)
suite_args() { # suite names -> meson test arguments
  local a=()
  for s in "$@"; do a+=(--suite "$s"); done
  echo "${a[@]}" --no-suite bench
}
suite_targets() { # build dir, suite names -> ninja targets the tests of those suites run
  local dir=$1; shift
  python3 - "$dir" "$@" <<'PY'
import json, os, subprocess, sys
build = os.path.abspath(sys.argv[1])
wanted = set(sys.argv[2:])
intro = lambda what: json.loads(subprocess.check_output(["meson", "introspect", build, what]))
files = {t["id"]: t["filename"][0] for t in intro("--targets")}
targets = set()
for test in intro("--tests"):  # depends: the executable, or what mpirun or a runner starts
    suites = {s.split(":")[-1] for s in test["suite"]}
    if suites & wanted and "bench" not in suites:
        targets.update(os.path.relpath(files[d], build) for d in test["depends"]
                       if d in files and files[d].startswith(build + "/"))
print(" ".join(sorted(targets)))
PY
}

# Without a GPU the CUDA targets only prove they compile and print SKIP: build them at -O0
# (scripts/configure.sh, which run.sh uses too).
bash scripts/configure.sh
ninja -C build -j "$jobs"
phase "main build"
run_suite build
phase "main tests"

# The MPI, shared-memory and preload suites again against MPICH (Debian's, beside Open MPI):
# the library, its MPI tests and libtcoll_mpi.so built with -Dmpi_impl=mpich, run under
# MPICH's Hydra launcher.
mpich_suites=(mpi shm preload)
[ -d build-mpich ] || meson setup build-mpich --buildtype=release -Dmpi_impl=mpich \
  -Dcuda=disabled
ninja -C build-mpich -j "$jobs" $(suite_targets build-mpich "${mpich_suites[@]}")
phase "MPICH build"
run_suite build-mpich --no-rebuild $(suite_args "${mpich_suites[@]}")
phase "MPICH tests"

# The preload suite again under the MPIs centres run now: Open MPI 5 and MPICH 5 from PyPI
# (their wheels, installed into .venv/mpi/ by scripts/setup_mpi_wheels.sh), each its own
# build with -Dmpi_prefix, and the preload built once against the MPI-5 standard ABI
# (-Dmpi_abi, run under MPICH 5's libmpi_abi). MPICH 5 runs the mpi suite too (it found a
# difference there: docs/preload.md, "Open MPI 5 and MPICH 5"); the shm suite and Open MPI
# 5's mpi suite pass too but stay out of CI for its minutes.
bash scripts/setup_mpi_wheels.sh
mpi5_builds=("openmpi5:openmpi5::preload" "mpich5:mpich5::mpi preload"
             "mpich5-abi:mpich5:-Dmpi_abi=true:preload")
for spec in "${mpi5_builds[@]}"; do
  IFS=: read -r name prefix extra suites <<<"$spec"
  read -r -a suites <<<"$suites"
  [ -d "build-$name" ] || meson setup "build-$name" --buildtype=release -Dcuda=disabled \
    -Dmpi_prefix="$PWD/.venv/mpi/$prefix" $extra
  ninja -C "build-$name" -j "$jobs" $(suite_targets "build-$name" "${suites[@]}")
  run_suite "build-$name" --no-rebuild $(suite_args "${suites[@]}")
  phase "$name build and tests"
done

# Sanitizers on the in-process transports and adaptors (threads, hierarchical/multi-ring,
# schedule, elastic averaging and hybrid, which start threads of their own; sparse under
# ASan+UBSan too), with the quick test matrix (TCOLL_TEST_LEVEL, read in
# tests/common/cases/level.hpp). Line tables only (-g1) keep reports symbolized. ASan
# builds at -O0: about 3x faster to compile than -O1 (75 s against 216 s for
# threads_allreduce.cpp) and its tests still finish in about 25 s. TSan stays at -O1, where
# its tests run several times faster than unoptimised. Both compile the typed test
# matrices for seven element types instead of twelve (TCOLL_TEST_FEW_TYPES, in
# tests/common/cases/types.hpp).
asan_flags="['-O0','-g1','-DTCOLL_TEST_FEW_TYPES']"
tsan_flags="['-O1','-g1','-DTCOLL_TEST_FEW_TYPES']"
[ -d build-asan ] || meson setup build-asan --buildtype=plain -Dcpp_args="$asan_flags" \
  -Db_sanitize=address,undefined -Db_lundef=false -Dmpi=disabled -Dcuda=disabled
ninja -C build-asan -j "$jobs" $(suite_targets build-asan "${asan_suites[@]}")
phase "ASan build"
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 TCOLL_TEST_LEVEL=quick \
  run_suite build-asan --no-rebuild $(suite_args "${asan_suites[@]}")
phase "ASan tests"

[ -d build-tsan ] || meson setup build-tsan --buildtype=plain -Dcpp_args="$tsan_flags" \
  -Db_sanitize=thread -Db_lundef=false -Dmpi=disabled -Dcuda=disabled
ninja -C build-tsan -j "$jobs" $(suite_targets build-tsan "${tsan_suites[@]}")
phase "TSan build"
TSAN_OPTIONS=halt_on_error=1 TCOLL_TEST_LEVEL=quick \
  run_suite build-tsan --no-rebuild $(suite_args "${tsan_suites[@]}")
phase "TSan tests"

# The closing lines over every suite and build: each test that did not pass (its build, name,
# result and the last lines it printed, so that a failure in a long CI log is found at its
# end), then "tests: N passed, N failed, N skipped".
python3 - build build-mpich build-openmpi5 build-mpich5 build-mpich5-abi build-asan build-tsan <<'PY'
import json, sys, os
counts = {"passed": 0, "failed": 0, "skipped": 0}
failures = []
for d in sys.argv[1:]:
    path = os.path.join(d, "meson-logs", "testlog.json")
    if not os.path.exists(path):
        continue
    for line in open(path):
        test = json.loads(line)
        r = test.get("result", "")
        key = {"OK": "passed", "EXPECTEDFAIL": "passed", "SKIP": "skipped"}.get(r, "failed")
        counts[key] += 1
        if key == "failed":
            failures.append((d, test))
for d, test in failures:
    print("test.sh: FAILED in {}: {} ({}, {:.0f} s); its last lines:".format(
        d, test.get("name"), test.get("result"), test.get("duration", 0)))
    output = (test.get("stdout") or "") + (test.get("stderr") or "")
    for text in output.splitlines()[-40:]:
        print("    " + text)
print("tests: {passed} passed, {failed} failed, {skipped} skipped".format(**counts))
PY
exit $status
