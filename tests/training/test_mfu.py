"""MFU that tells the truth: the peak of the exact card (SXM, PCIe and NVL parts differ), or train.peak_flops;
a train row that compiled a graph says so and has no MFU; the summary's MFU per level comes from the
rows without a compile."""

import json

import pytest
import torch
from helpers import compose_config, typed

from mltrain.run import run
from mltrain.training.devices import peak_flops, peak_for_name


@pytest.mark.parametrize("name,peak", [
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H200", 989e12), ("NVIDIA H200 NVL", 835e12), ("NVIDIA GH200 480GB", 989e12), ("NVIDIA H20", 148e12),
    ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA A100 80GB PCIe", 312e12), ("NVIDIA B200", 2.25e15),
    ("NVIDIA L40S", 362e12), ("NVIDIA L40", 181e12), ("NVIDIA L4", 121e12), ("NVIDIA GeForce RTX 4090", 165e12),
    ("Tesla V100-SXM2-16GB", None), ("Some New Card", None),
])
def test_the_peak_is_the_exact_cards(name, peak):
    assert peak_for_name(name) == peak


def test_train_peak_flops_overrides_the_table_and_gives_a_cpu_a_peak():
    assert peak_flops(torch.device("cpu")) is None
    assert peak_flops(torch.device("cpu"), 2e11) == 2e11


def _rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_rows_that_compiled_say_so_and_the_summary_gives_steady_mfu_per_level(tmp_path, monkeypatch):
    monkeypatch.setenv("MLTRAIN_COMPILE_BACKEND", "aot_eager")
    cfg = compose_config("device=cpu", "train.peak_flops=1e12", "train.compile=true", "coarsening=evenodd",
                         "multilevel.n_cycles=2", "multilevel.coarse_steps=4", "multilevel.coarse_log_interval=2",
                         "multilevel.diagnostics=false")  # else the coarse graph compiles in the diagnostics
    run(typed(cfg), run_dir=tmp_path)
    train = [r for r in _rows(tmp_path) if "train/loss" in r]
    by_level = {level: [r for r in train if r["level"] == level] for level in (0, 1)}
    for rows in by_level.values():
        assert rows[0].get("compiled_in_row") and "mfu" not in rows[0]  # its time includes compiling
        assert any("mfu" in r and 0 < r["mfu"] < 1 and not r.get("compiled_in_row") for r in rows[1:])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["compiled"] and summary["peak_flops"] == 1e12
    assert set(summary["mfu_by_level"]) == {"0", "1"} and all(0 < m < 1 for m in summary["mfu_by_level"].values())


def test_an_eager_cpu_run_has_no_mfu_unless_given_a_peak(tmp_path):
    run(typed(compose_config("device=cpu")), run_dir=tmp_path / "plain")
    summary = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert not summary["compiled"] and "mfu_by_level" not in summary
    assert not any("mfu" in r or r.get("compiled_in_row") for r in _rows(tmp_path / "plain"))
