"""The core utilities every layer may use: one-line errors, config choices and plain trees, atomic and
guarded writes, Ctrl-C handling, range checks, FLOP accounting, the tools' dataclass <-> JSON conversion. Nothing here imports another layer."""
