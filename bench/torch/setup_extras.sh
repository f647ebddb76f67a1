#!/usr/bin/env bash
# .venv-extras: the repository's .venv (its torch, tcoll_torch's dependencies) plus what only
# benchmarks need: DeepSpeed (bench/torch/collectives_perf.py --deepspeed) and torchvision's
# model definitions (bench/torch/ddp_speed.py). A separate environment, so these never
# change the .venv that CI tests: it sees the .venv's packages through a .pth file.
# torchvision goes in without its dependencies (its wheel pins another torch; the model
# definitions are plain torch.nn). DeepSpeed JIT-builds its shared-memory op (ninja, the
# .venv's torch headers) on first use, into ~/.cache/torch_extensions.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$root/.venv/bin/python" ] || bash "$root/scripts/setup_torch.sh"
venv=$root/.venv-extras
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
main_site=$("$root/.venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
own_site=$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
echo "$main_site" >"$own_site/tcoll_main_venv.pth"
pip=("$venv/bin/pip" install -q --disable-pip-version-check)
"$venv/bin/python" -c 'import deepspeed' >/dev/null 2>&1 || "${pip[@]}" deepspeed
"$venv/bin/python" -c 'import torchvision' >/dev/null 2>&1 || "${pip[@]}" --no-deps torchvision
"$venv/bin/python" -c 'import PIL' >/dev/null 2>&1 || "${pip[@]}" pillow # torchvision imports it
"$venv/bin/python" - <<'PY' 2>/dev/null | tail -1
import deepspeed, torch, torchvision
print("setup_extras: torch", torch.__version__, "deepspeed", deepspeed.__version__,
      "torchvision", torchvision.__version__)
PY
