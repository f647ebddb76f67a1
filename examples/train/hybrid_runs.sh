#!/usr/bin/env bash
# The training runs behind docs/hybrid.md, "In the training app": dense against
# --scheme hybrid (Poseidon's per-layer SFB or dense) on thread ranks, ring allreduce for
# every dense tensor (the algorithm best_scheme's model assumes).
#  1. accuracy: 2, 4, 8, 16 ranks, 3 epochs, no emulated link;
#  2. time per iteration on emulated links (tcoll::shaped, one rank per node, 20 us):
#     global batch 32, 128, 512, 2048 at 4 ranks on 1 and 10 Gbit/s, and 2, 4, 8, 16 ranks at
#     batch 256 on 1 Gbit/s; one epoch over the 4,000 training samples (evaluation of the
#     1,000 test samples included, the same for both schemes).
#     Hybrid here exchanges after backward (--overlap none), as when the table was made,
#     twice: with Poseidon's plan (--gemm-us 0: the reconstruction GEMM ignored; files
#     time_hybrid_*) and with the GEMM cost calibrated at plan time (the app's default;
#     files time_calibrated_*).
#  3. overlap: Poseidon's Algorithm 2 (--overlap layerwise, hybrid_scheduler: a job per
#     tensor during backward) against the same jobs after backward, for hybrid and dense,
#     at 4 ranks, batch 32, 128, 512, 1 and 10 Gbit/s, REPS repetitions (default 3);
#     Poseidon's plan (--gemm-us 0), so that the SFB jobs exist to overlap.
# Part 1 uses Poseidon's plan too (--gemm-us 0): it checks SFB's accuracy.
# One JSON and one stdout log (with the per-layer plan and bytes) per run in OUT_DIR;
# plot with examples/train/plot_hybrid.py (--overlap-markdown for part 3).
#
#   bash examples/train/hybrid_runs.sh [BUILD_DIR] [OUT_DIR] [PARTS]
#
# PARTS: "acc time" (default), or any of acc, time, overlap.
set -euo pipefail
build=${1:-build}
out=${2:-docs/results/hybrid}
parts=${3:-acc time}
exe="$build/examples/train_mnist"
[ -x "$exe" ] || { echo "hybrid_runs: $exe not built" >&2; exit 1; }
mkdir -p "$out"
run() { # NAME ARGS...
  local name=$1
  shift
  "$exe" --algo ring --json "$out/$name.json" "$@" > "$out/$name.txt"
  echo "== $name: $(grep -E '^epoch' "$out/$name.txt" | tail -n 1)"
}
[[ " $parts " == *" acc "* ]] && for ranks in 2 4 8 16; do
  for scheme in dense hybrid; do
    run "acc_${scheme}_p${ranks}" --ranks "$ranks" --epochs 3 --scheme "$scheme" --gemm-us 0
  done
done
if [[ " $parts " == *" overlap "* ]]; then
  for rep in $(seq 1 "${REPS:-3}"); do
    for gbit in 1 10; do
      for batch in 32 128 512; do
        for scheme in dense hybrid; do
          for overlap in none layerwise; do
            run "ovl_${scheme}_${overlap}_g${gbit}_p4_b${batch}_r${rep}" --ranks 4 \
              --batch "$batch" --epochs 1 --link-gbit "$gbit" --scheme "$scheme" \
              --overlap "$overlap" --autotune 0 --gemm-us 0
          done
        done
      done
    done
  done
fi
[[ " $parts " == *" time "* ]] || exit 0
time_runs() { # NAME_SUFFIX ARGS...: dense, Poseidon's hybrid plan, the calibrated plan
  local suffix=$1
  shift
  run "time_dense_$suffix" "$@" --scheme dense --overlap none
  run "time_hybrid_$suffix" "$@" --scheme hybrid --overlap none --gemm-us 0
  run "time_calibrated_$suffix" "$@" --scheme hybrid --overlap none --gemm-us calibrate
}
for gbit in 1 10; do
  for batch in 32 128 512 2048; do
    time_runs "g${gbit}_p4_b${batch}" --ranks 4 --batch "$batch" --epochs 1 --link-gbit "$gbit"
  done
done
for ranks in 2 4 8 16; do # 4 ranks at batch 256: between the batch sweep's points
  time_runs "g1_p${ranks}_b256" --ranks "$ranks" --batch 256 --epochs 1 --link-gbit 1
done
