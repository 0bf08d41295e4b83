"""Training runs end to end: a short run learns, every scheme runs and its steps and FLOPs add up, three
levels, the schedule control trains the fine model for the same FLOPs."""

import math

import pytest
from helpers import ML

from mltrain.core.flops import train_flops_per_step


B, T = 4, 16  # conftest.TINY's batch size and context


def test_short_run_lowers_val_loss_well_below_its_start_and_ln_vocab(train_run):
    rows, s = train_run("optim=adamw", "optim.lr=3e-3", "train.max_steps=80", "train.eval_interval=40",
                        "train.batch_size=8", "model.block_size=32")
    vals = [r["val/loss"] for r in rows if "val/loss" in r]
    assert vals[0] == pytest.approx(s["initial_val_loss"]) and vals[-1] == s["final_val_loss"]
    assert vals[0] > math.log(256) - 0.3  # starts near uniform over 256 bytes
    assert s["final_val_loss"] < vals[0] - 1.5
    assert s["final_val_loss"] < math.log(256) - 1.5
    assert s["fine_steps"] == 80 and s["tokens"] == 80 * 8 * 32


@pytest.mark.parametrize("scheme", ["evenodd", "stride3", "random", "average"])
def test_every_scheme_runs_and_steps_and_flops_add_up(train_run, scheme):
    layers = "model.n_layer=6"
    rows, s = train_run(layers, *ML, f"coarsening={scheme}")
    k = {"evenodd": 2, "stride3": 3, "random": 2, "average": 1}[scheme]
    assert s["run_kind"] == "multilevel" and s["coarsening"] == scheme
    assert s["fine_steps"] == 24 and s["coarse_steps"] == 3 * k * 4
    n_coarse_blocks = 6 // (3 if scheme == "stride3" else 2)
    fine = train_flops_per_step(6, 32, 256, T, B)
    coarse = train_flops_per_step(n_coarse_blocks, 32, 256, T, B)
    assert s["coarse_flops"] == pytest.approx(s["coarse_steps"] * coarse)
    assert s["total_flops"] == pytest.approx(24 * fine + s["coarse_steps"] * coarse)
    assert s["fine_equivalent_steps"] == pytest.approx(s["total_flops"] / fine)
    assert s["tokens"] == (24 + s["coarse_steps"]) * B * T
    coarse_rows = [r for r in rows if r.get("phase") == "coarse"]
    assert coarse_rows and all(r["level"] == 1 and "coarse_model" in r and "cycle" in r for r in coarse_rows)
    assert [r["cycle"] for r in rows if "val/loss" in r and "cycle" in r] == [0, 1, 2]  # eval after each cycle
    diag = [r for r in rows if "diag/grad_cosine" in r]
    assert len(diag) == 3 * k and all(-1 <= r["diag/grad_cosine"] <= 1 for r in diag)
    assert all(math.isfinite(r["diag/coarse_loss"]) and math.isfinite(r["diag/fine_loss"]) for r in diag)


def test_three_levels_end_to_end(train_run):
    rows, s = train_run("model.n_layer=8", *ML, "multilevel.levels=3")
    # per cycle: 2 level-1 models x (4 steps + 2 level-2 models x 4 steps)
    assert s["coarse_steps"] == 3 * 2 * (4 + 2 * 4)
    assert {r["level"] for r in rows if r.get("phase") == "coarse"} == {1, 2}
    assert s["final_val_loss"] < s["initial_val_loss"]


def test_schedule_control_trains_the_fine_model_for_the_same_flops(train_run):
    _, ml = train_run("model.n_layer=6", *ML, name="ml")
    rows, ctl = train_run("model.n_layer=6", *ML, "multilevel.control=schedule", name="ctl")
    assert ctl["run_kind"] == "schedule_control" and ctl["coarse_steps"] == 0
    assert ctl["control_steps"] > 0 and all(r["level"] == 0 for r in rows if "train/loss" in r)
    # the coarse phases' FLOPs over the whole run, to the nearest fine step (not rounded per phase)
    assert ctl["control_steps"] == round(ml["coarse_flops"] / ml["flops_per_fine_step"])
    assert abs(ctl["total_flops"] - ml["total_flops"]) <= ml["flops_per_fine_step"] / 2
