#!/usr/bin/env bash
# The CPU study behind the README's "What we found on CPU": does multilevel training save FLOPs against
# the fair single-level reference, beyond seed noise?
#
#   * the budget frontier: single-level runs whose cosine schedules end at 0.3 ... 2.2 of
#     the full run
#   * the paper's method at δ = 0.1, 0.25, 0.5
#   * the controls: the LR-schedule control, random-permutation coarsening, the ODE step
#     (coarsening.step_scale=stride), AdamW with the coarse optimizer reset (against an AdamW frontier)
#   * 5 seeds each, paired by seed (the same fine batches in the same order in every run of a seed)
#
# `scale=cpu` shrunk on each line to what a shared 2-core machine finishes in minutes (a 4-block d=32
# GPT, 300 steps of 8 x 32 bytes; coarse phases 6 cycles x 2 x 15 steps ≈ 34% of the fine FLOPs, as
# in the paper; a held-out set of 512 sequences), two jobs at a time with one thread each; then
# `mltrain-compare` writes the two reports.
#   bash scripts/cpu_evidence.sh [OUT_DIR]        (default OUT_DIR: outputs/cpu_evidence)
set -euo pipefail
out=${1:-outputs/cpu_evidence}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
start=$(date +%s)

# SGD: the frontier, the method at three δ, then the controls.
mltrain -m hydra/launcher=local hydra.launcher.n_jobs=2 experiment=single scale=cpu \
  train.budget=0.3,0.5,0.75,1.0,1.3,1.7,2.2 seed=0,1,2,3,4 \
  model.n_layer=4 model.n_embd=32 model.n_head=2 model.block_size=32 train.batch_size=8 train.max_steps=300 \
  schedule.warmup_steps=14 train.eval_interval=100 train.eval_batches=64 train.log_interval=20 \
  train.progress=false hydra.sweep.dir="$out/sgd/frontier"
mltrain -m hydra/launcher=local hydra.launcher.n_jobs=2 experiment=multilevel scale=cpu \
  multilevel.delta=0.1,0.25,0.5 seed=0,1,2,3,4 \
  model.n_layer=4 model.n_embd=32 model.n_head=2 model.block_size=32 train.batch_size=8 train.max_steps=300 \
  schedule.warmup_steps=14 train.eval_interval=100 train.eval_batches=64 train.log_interval=20 \
  multilevel.n_cycles=6 multilevel.coarse_steps=15 multilevel.eval_every_cycle=false train.progress=false hydra.sweep.dir="$out/sgd/multilevel"
mltrain -m hydra/launcher=local hydra.launcher.n_jobs=2 experiment=schedule_control,random_control,ode_step \
  scale=cpu seed=0,1,2,3,4 \
  model.n_layer=4 model.n_embd=32 model.n_head=2 model.block_size=32 train.batch_size=8 train.max_steps=300 \
  schedule.warmup_steps=14 train.eval_interval=100 train.eval_batches=64 train.log_interval=20 \
  multilevel.n_cycles=6 multilevel.coarse_steps=15 multilevel.eval_every_cycle=false train.progress=false hydra.sweep.dir="$out/sgd/controls"

# AdamW with the coarse optimizer reset, against single-level AdamW with the same settings.
mltrain -m hydra/launcher=local hydra.launcher.n_jobs=2 experiment=single scale=cpu optim=adamw \
  optim.weight_decay=0.1 train.budget=0.5,1.0,1.3,1.7,2.2 seed=0,1,2,3,4 \
  model.n_layer=4 model.n_embd=32 model.n_head=2 model.block_size=32 train.batch_size=8 train.max_steps=300 \
  schedule.warmup_steps=14 train.eval_interval=100 train.eval_batches=64 train.log_interval=20 \
  train.progress=false hydra.sweep.dir="$out/adamw/frontier"
mltrain -m hydra/launcher=local hydra.launcher.n_jobs=2 experiment=adamw_reset scale=cpu seed=0,1,2,3,4 \
  model.n_layer=4 model.n_embd=32 model.n_head=2 model.block_size=32 train.batch_size=8 train.max_steps=300 \
  schedule.warmup_steps=14 train.eval_interval=100 train.eval_batches=64 train.log_interval=20 \
  multilevel.n_cycles=6 multilevel.coarse_steps=15 multilevel.eval_every_cycle=false train.progress=false hydra.sweep.dir="$out/adamw/multilevel"

mltrain-compare "$out/sgd" --logx --dpi 80 --out "$out/report"
mltrain-compare "$out/adamw" --logx --dpi 80 --out "$out/report_adamw"
echo "cpu_evidence: $(( $(date +%s) - start )) s wall, reports in $out/report and $out/report_adamw"
