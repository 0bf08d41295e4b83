"""Training: the one step function, optimizers and schedules, FLOP accounting, devices and data
parallel, memory bounds, checkpoints and resume."""
