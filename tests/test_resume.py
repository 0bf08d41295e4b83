"""Stopping anywhere (mid coarse phase included) and resuming from a checkpoint equals never stopping."""

import pytest
import torch
from conftest import compose_config

from mltrain.checkpoint import load_checkpoint, save_checkpoint
from mltrain.run import build

PLAN = ["train.max_steps=12", "train.eval_interval=6", "train.eval_batches=1", "multilevel.n_cycles=3",
        "multilevel.coarse_steps=5"]


def session(*overrides):
    rows = []
    return build(compose_config(*PLAN, *overrides), rows.append), rows


def steps_taken(s):
    st = s.trainer.state
    return st.fine_steps + st.coarse_steps + st.control_steps


@pytest.mark.parametrize("overrides,stop_at", [
    (["coarsening=evenodd"], 4),  # inside cycle 0's first coarse phase
    (["coarsening=evenodd", "optim=adamw", "multilevel.coarse_optimizer_state=reset"], 9),
    (["coarsening=average", "multilevel.levels=2"], 14),
    (["coarsening=evenodd", "multilevel.control=schedule"], 5),
    ([], 7),
])
def test_resume_mid_cycle_is_exact(tmp_path, overrides, stop_at):
    whole, _ = session(*overrides)
    assert whole.runner.run()

    first, _ = session(*overrides)
    assert not first.runner.run(should_stop=lambda: steps_taken(first) >= stop_at)
    assert steps_taken(first) == stop_at
    at_stop = first.trainer.elapsed()
    save_checkpoint(tmp_path / "ckpt.pt", first.runner)

    resumed, _ = session(*overrides)
    load_checkpoint(tmp_path / "ckpt.pt", resumed.runner)
    assert resumed.runner.run()

    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert resumed.trainer.state == whole.trainer.state
    assert resumed.trainer.last_loss.keys() == whole.trainer.last_loss.keys()
    assert resumed.trainer.elapsed() >= at_stop  # wall time goes on, not from zero
    assert resumed.runner.sampler.position == whole.runner.sampler.position
