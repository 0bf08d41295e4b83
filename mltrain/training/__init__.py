"""Training: the one step function and its clock, train rows and non-finite losses, held-out evaluation
and the gradient diagnostics apart from the step, optimizers and schedules, the plan's runner, devices and
data parallel, checkpoints and resume (FLOPs: mltrain/core/flops.py; memory bounds: mltrain/model/memory.py)."""
