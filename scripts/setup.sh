#!/usr/bin/env bash
# Installs what tcoll's build, tests and benchmarks need, only where missing (Debian/Ubuntu).
set -euo pipefail
need=()
for pkg in meson ninja-build g++ pkg-config doctest-dev libopenmpi-dev openmpi-bin mpich libmpich-dev python3 \
           iproute2 clang-format python3-venv libeigen3-dev zlib1g-dev nlohmann-json3-dev python3-mpi4py; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
# python3-matplotlib only draws the planner plot; not required for tests
if [ "${TCOLL_WITH_PLOTS:-0}" = 1 ]; then
  dpkg -s python3-matplotlib >/dev/null 2>&1 || need+=(python3-matplotlib)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# OpenMPI refuses root and oversubscription unless told; CI runs as root on 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The MNIST subset examples/train learns from (a no-op when data/mnist already holds it).
bash "$(dirname "$0")/fetch_mnist.sh" || echo "setup: MNIST not fetched; the example_train test will skip"
echo "setup: ok ($(meson --version 2>/dev/null | sed 's/^/meson /'), $(mpirun --version 2>/dev/null | head -1))"
