#!/usr/bin/env bash
# Configures build/ when it is missing, one way for every script that uses it (run.sh,
# test.sh): release, and without a GPU the CUDA targets only compile-checked (-O0, they
# print SKIP when run), so the README's two commands in either order compile the same.
set -euo pipefail
cd "$(dirname "$0")/.."
gpu_build=full
if ! nvidia-smi -L >/dev/null 2>&1; then gpu_build=compile_check; fi
[ -d build ] || meson setup build --buildtype=release -Dgpu_build=$gpu_build "$@"
