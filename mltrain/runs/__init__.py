"""Runs on disk: the run-file contract and its readers (files, torch-free), the bookkeeping keys and
override strings (keys), labels and names, run directories and their lock, tracking (metrics, summary,
run.json) and its W&B mirror, provenance and the final weights (atomic writes: mltrain/core/atomic.py)."""
