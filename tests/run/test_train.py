"""Training runs on the embedded corpus, in-process (compose + run) and through the CLI."""

import json
import math

import pytest
from helpers import ML, TINY, run_tool_here

from mltrain.core.errors import ConfigError


def deterministic(rows):
    drop = {"time_s", "train_time_s", "tokens_per_s", "mfu"}
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


def test_output_contract(train_run):
    rows, s = train_run()
    for row in rows:
        assert {"step", "flops", "tokens", "time_s"} <= row.keys()
    train_rows = [r for r in rows if "train/loss" in r]
    assert train_rows and all("lr" in r for r in train_rows)
    assert [r["step"] for r in train_rows] == [4, 8, 12, 16, 20, 24]
    assert [r["step"] for r in rows if "val/loss" in r] == [0, 12, 24]
    flops = [r["flops"] for r in rows]
    assert flops == sorted(flops) and flops[-1] == s["total_flops"]
    for key in ("n_params", "total_flops", "tokens", "fine_steps", "final_train_loss", "final_val_loss",
                "wall_time_s", "tokens_per_s", "flops_formula", "device"):
        assert s[key] is not None, key
    assert s["flops_formula"] == "6N+12LTd" and s["device"] == "cpu" and s["run_kind"] == "single"
    assert s["total_flops"] == pytest.approx(24 * s["flops_per_fine_step"])


def test_same_seed_same_metrics_other_seed_different(train_run):
    a, _ = train_run("seed=3", name="a")
    b, _ = train_run("seed=3", name="b")
    c, _ = train_run("seed=4", name="c")
    assert deterministic(a) == deterministic(b)
    assert deterministic(a) != deterministic(c)


def test_coarsening_none_is_the_baseline_whatever_the_multilevel_keys(train_run):
    base, _ = train_run(name="base")
    none, s = train_run("coarsening=none", "multilevel.delta=0.9", "multilevel.n_cycles=2", name="none")
    assert deterministic(base) == deterministic(none)
    assert s["run_kind"] == "single"


def test_grad_accum_gives_the_same_training_as_one_big_batch(train_run):
    one, _ = train_run(name="one")
    two, _ = train_run("train.grad_accum=2", name="two")
    l1 = [r["train/loss"] for r in one if "train/loss" in r]
    l2 = [r["train/loss"] for r in two if "train/loss" in r]
    assert l1 == pytest.approx(l2, rel=1e-4)


def test_adamw_with_coarse_reset_and_fine_momentum_reset(train_run):
    _, s = train_run(*ML, "optim=adamw", "multilevel.coarse_optimizer_state=reset",
                 "multilevel.fine_momentum_after_prolong=reset")
    assert s["coarse_steps"] == 3 * 2 * 4 and math.isfinite(s["final_val_loss"])


def test_existing_run_dir_is_refused_and_untouched(tmp_path, train_run):
    train_run(name="done")
    before = (tmp_path / "done" / "metrics.jsonl").read_bytes()
    with pytest.raises(ConfigError, match="holds an earlier run"):
        train_run(name="done")
    assert (tmp_path / "done" / "metrics.jsonl").read_bytes() == before


def _cli(args, cwd):
    """`python -m mltrain.cli args` in cwd, run in this process (helpers.run_tool_here)."""
    return run_tool_here("mltrain", *args, cwd=cwd)


def test_mltrain_runs_from_outside_the_repository(tmp_path):
    out = tmp_path / "out"
    proc = _cli([*TINY, "train.max_steps=4", "train.eval_interval=2", f"hydra.run.dir={out}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fine_steps"] == 4
    assert (out / ".hydra" / "config.yaml").exists()


@pytest.mark.parametrize("args,needle", [
    (["coarsening=evenodd", "multilevel.delta=2"], "multilevel.delta=2.0 must be in [0, 1]"),
    (["coarsening=stride3"], "not divisible by coarsening.k=3"),
    (["train.max_stepz=3"], "train.max_stepz"),
    (["data=text", "data.path=/nonexistent/corpus/*.txt"], "/nonexistent/corpus"),  # a DataError, in the task
])
def test_bad_input_fails_before_compute_with_one_message(tmp_path, args, needle):
    out = tmp_path / "out"
    proc = _cli([*args, f"hydra.run.dir={out}"], cwd=tmp_path)
    assert proc.returncode != 0
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (out / "metrics.jsonl").exists()


def test_cli_refuses_a_run_dir_that_holds_a_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 0}\n')
    proc = _cli([f"hydra.run.dir={out}"], cwd=tmp_path)
    assert proc.returncode == 2 and "holds an earlier run" in proc.stderr
    assert (out / "metrics.jsonl").read_text() == '{"step": 0}\n' and not (out / ".hydra").exists()
