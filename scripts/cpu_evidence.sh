#!/usr/bin/env bash
# The CPU evidence sweep at scale=cpu: 3 seeds of the single-level baseline, of the multilevel method
# at δ ∈ {0.1, 0.25, 0.5}, and of the review's LR-schedule control, on the embedded corpus; then the
# comparison report. About 15 runs of ~1 minute each on 2 cores.
# With `all`, also the other controls (random permutation, stride 3, the ODE step, AdamW with coarse
# reset) and an AdamW baseline for the last one, with a second report against that baseline.
#   bash scripts/cpu_evidence.sh [OUT_DIR] [all]     (default OUT_DIR: outputs/cpu_evidence)
set -euo pipefail
out=${1:-outputs/cpu_evidence}
mltrain -m experiment=single scale=cpu seed=0,1,2 train.progress=false hydra.sweep.dir="$out/single"
mltrain -m experiment=multilevel scale=cpu seed=0,1,2 multilevel.delta=0.1,0.25,0.5 train.progress=false \
  hydra.sweep.dir="$out/multilevel"
mltrain -m experiment=schedule_control scale=cpu seed=0,1,2 train.progress=false hydra.sweep.dir="$out/control"
if [ "${2:-}" = all ]; then
  mltrain -m experiment=random_control,stride3,ode_step,adamw_reset scale=cpu seed=0,1,2 train.progress=false \
    hydra.sweep.dir="$out/controls"
  mltrain -m experiment=single scale=cpu optim=adamw seed=0,1,2 train.progress=false hydra.sweep.dir="$out/adamw_single"
  mltrain-compare "$out/adamw_single" "$out/controls" --baseline experiment=single,optim=adamw,scale=cpu \
    --out "$out/report_adamw"
  mltrain-compare "$out/single" "$out/multilevel" "$out/control" "$out/controls" --out "$out/report"
else
  mltrain-compare "$out" --out "$out/report"
fi
