"""Training: the one step function and its clock, train rows and non-finite losses, held-out evaluation
and the gradient diagnostics apart from the step, optimizers and schedules, FLOP accounting, devices and
data parallel, memory bounds, checkpoints and resume."""
