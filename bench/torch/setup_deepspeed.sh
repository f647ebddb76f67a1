#!/usr/bin/env bash
# .venv-deepspeed: the repository's .venv (its torch, tcoll_torch's dependencies) plus
# DeepSpeed from PyPI, for bench/torch/collectives_perf.py --deepspeed. A separate
# environment, so DeepSpeed's dependencies never change the .venv that CI tests; it sees the
# .venv's packages through a .pth file. DeepSpeed JIT-builds its shared-memory op (ninja,
# the .venv's torch headers) on first use, into ~/.cache/torch_extensions.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$root/.venv/bin/python" ] || bash "$root/scripts/setup_torch.sh"
venv=$root/.venv-deepspeed
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
main_site=$("$root/.venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
own_site=$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
echo "$main_site" >"$own_site/tcoll_main_venv.pth"
"$venv/bin/python" -c 'import deepspeed' >/dev/null 2>&1 ||
  "$venv/bin/pip" install -q --disable-pip-version-check deepspeed
"$venv/bin/python" -c 'import deepspeed, torch; print("setup_deepspeed: deepspeed", deepspeed.__version__, "torch", torch.__version__)' 2>/dev/null | tail -1
