#!/usr/bin/env bash
# The main job: install what is missing, build, and run the allreduce benchmark in process
# (threads transport, every algorithm). Extra arguments go to allreduce_perf.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/configure.sh >/dev/null
ninja -C build bench/allreduce_perf >/dev/null
if [ $# -eq 0 ]; then set -- -t threads -g 2 -a all -b 8 -e 64M -f 8 -n 20 -w 5; fi
exec ./build/bench/allreduce_perf "$@"
