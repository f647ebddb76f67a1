#!/usr/bin/env bash
# The Python side of tcoll (docs/torch.md): a virtual environment of the repository (.venv)
# with torch from PyPI (its default Linux wheel, about 5 GB), pytest, numpy, expecttest
# (PyTorch's own distributed test suite imports it: tests/torch/pytorch_suite.py) and mpi4py
# (its PyPI wheel picks MPICH or Open MPI at run time: the preload's MPICH tests use it), then the
# torch.distributed backend built against that torch (python/tcoll_torch/_C*.so; ninja
# recompiles only what changed). Each step runs only where needed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.venv
if [ ! -x "$venv/bin/python" ]; then
  # Debian's system python3 (python3-venv); any python3 >= 3.10 with venv does
  python=$(command -v python3)
  [ -x /usr/bin/python3 ] && python=/usr/bin/python3
  "$python" -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import torch, pytest, numpy, mpi4py, expecttest' >/dev/null 2>&1; then
  echo "setup_torch: installing torch, pytest, numpy, expecttest and mpi4py into $venv (about 5 GB)"
  "$venv/bin/pip" install -q --disable-pip-version-check torch pytest numpy mpi4py expecttest
fi
cd "$root/python"
MAX_JOBS=${MAX_JOBS:-$(nproc)} "$venv/bin/python" setup.py -q build_ext --inplace >/tmp/tcoll-torch-build.log 2>&1 ||
  { cat /tmp/tcoll-torch-build.log; echo "setup_torch: building tcoll_torch failed"; exit 1; }
echo "setup_torch: ok (torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'))"
