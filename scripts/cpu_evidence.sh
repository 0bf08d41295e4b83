#!/usr/bin/env bash
# The CPU evidence sweep: 3 seeds of the single-level baseline, of the multilevel method at
# δ ∈ {0.1, 0.25, 0.5}, and of the review's LR-schedule control, on the embedded corpus; then the
# comparison report. About 15 runs of ~1 minute each on 2 cores.
# With `all`, also the other controls (random permutation, stride 3, AdamW with coarse reset) and an
# AdamW baseline for the last one, with a second report against that baseline (~12 more runs).
#   bash scripts/cpu_evidence.sh [OUT_DIR] [all]     (default OUT_DIR: outputs/cpu_evidence)
set -euo pipefail
out=${1:-outputs/cpu_evidence}
mltrain -m experiment=cpu_single seed=0,1,2 train.progress=false hydra.sweep.dir="$out/single"
mltrain -m experiment=cpu_multilevel seed=0,1,2 multilevel.delta=0.1,0.25,0.5 train.progress=false \
  hydra.sweep.dir="$out/multilevel"
mltrain -m experiment=cpu_schedule_control seed=0,1,2 train.progress=false hydra.sweep.dir="$out/control"
if [ "${2:-}" = all ]; then
  mltrain -m experiment=cpu_random_control,cpu_stride3,cpu_adamw_reset seed=0,1,2 train.progress=false \
    hydra.sweep.dir="$out/controls"
  mltrain -m experiment=cpu_single optim=adamw seed=0,1,2 train.progress=false hydra.sweep.dir="$out/adamw_single"
  mltrain-compare "$out/adamw_single" "$out/controls" --baseline experiment=cpu_single,optim=adamw \
    --out "$out/report_adamw"
  mltrain-compare "$out/single" "$out/multilevel" "$out/control" "$out/controls" --out "$out/report"
else
  mltrain-compare "$out" --out "$out/report"
fi
