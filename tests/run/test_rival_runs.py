"""Each rival method trains end to end with fewer FLOPs than single-level training."""

import math

import pytest

from mltrain.core.flops import train_flops_per_token
from mltrain.method.layer_drop import LayerDrop


DROPPING = ["layer_drop.gamma=0.3"]  # θ(t) near its floor after a few steps, so a 24-step run drops blocks


@pytest.mark.parametrize("method,extra", [("stacking", []), ("layer_drop", DROPPING), ("raptr", [])])
def test_each_rival_trains_end_to_end_with_fewer_flops_than_single_level(train_run, method, extra):
    rows, summary = train_run(f"experiment={method}", *extra, name=method)
    assert summary["status"] == "finished" and summary["run_kind"] == method and summary["fine_steps"] == 24
    assert math.isfinite(summary["final_val_loss"]) and not {"delta", "coarse_steps"} & set(summary)  # none of multilevel's
    blocks = [r["blocks"] for r in rows if "train/loss" in r]
    assert min(blocks) < 4  # fewer blocks on some steps
    flops = lambda n_blocks: train_flops_per_token(n_blocks, 32, 256, 16) * 4 * 16  # noqa: E731 (batch 4 x 16)
    assert summary["total_flops"] < 24 * flops(4)  # single-level training: every block at every step
    if method == "layer_drop":  # each step cost what the blocks it drew cost
        policy = LayerDrop(4, theta_bar=0.5, gamma=0.3, profile="linear", rescale=True, seed=0)
        assert summary["total_flops"] == pytest.approx(sum(flops(len(policy.path(t).blocks)) for t in range(24)))
    if method == "stacking":  # 7 steps of the 2-block model, then the grown 4-block one
        assert blocks == [2.0, 2.5, 4.0, 4.0, 4.0, 4.0]
        assert summary["total_flops"] == pytest.approx(7 * flops(2) + 17 * flops(4))
    if method == "raptr":  # paths grow stage by stage, to the full model
        assert blocks == sorted(blocks) and blocks[-1] == 4
