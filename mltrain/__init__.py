"""mltrain: multilevel depth-coarsening training of GPT decoders (Lauga et al. 2025, arXiv 2504.18590)."""

__version__ = "0.1.0"
