#!/usr/bin/env bash
# The CPU evidence sweep: 3 seeds of the single-level baseline, of the multilevel method at
# δ ∈ {0.1, 0.25, 0.5}, and of the review's LR-schedule control, on the embedded corpus; then the
# comparison report. About 15 runs of ~1 minute each on 2 cores.
#   bash scripts/cpu_evidence.sh [OUT_DIR]     (default: outputs/cpu_evidence)
set -euo pipefail
out=${1:-outputs/cpu_evidence}
mltrain -m experiment=cpu_single seed=0,1,2 train.progress=false hydra.sweep.dir="$out/single"
mltrain -m experiment=cpu_multilevel seed=0,1,2 multilevel.delta=0.1,0.25,0.5 train.progress=false \
  hydra.sweep.dir="$out/multilevel"
mltrain -m experiment=cpu_schedule_control seed=0,1,2 train.progress=false hydra.sweep.dir="$out/control"
mltrain-compare "$out" --out "$out/report"
