"""Runs on disk: run directories and their lock, metrics and summary (tracking, W&B), provenance,
the final weights, atomic writes and names."""
