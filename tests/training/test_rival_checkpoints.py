"""A rival method's run stopped mid stage resumes exactly; a checkpoint of another rival setting is
refused."""

import pytest
import torch
from helpers import compose_config, typed

from mltrain.core.errors import CheckpointError
from mltrain.run import build
from mltrain.training.checkpoint import load_checkpoint, save_checkpoint


DROPPING = ["layer_drop.gamma=0.3"]  # θ(t) near its floor after a few steps, so a 24-step run drops blocks


def session(*overrides):
    return build(typed(compose_config(*overrides)), lambda row: None)


@pytest.mark.parametrize("overrides,stop_at", [
    (["experiment=stacking"], 4),  # inside the shallow stage
    (["experiment=stacking"], 7),  # the shallow stage's last step, before the growth
    (["experiment=stacking", "optim=adamw", "stacking.optimizer_state=copy", "stacking.operator=interleave"], 10),
    (["experiment=layer_drop", *DROPPING], 9),
    (["experiment=raptr"], 8),  # inside the second stage
])
def test_resume_mid_stage_is_exact(tmp_path, overrides, stop_at):
    whole = session(*overrides)
    assert whole.runner.run()

    first = session(*overrides)
    assert not first.runner.run(should_stop=lambda: first.trainer.state.fine_steps >= stop_at)
    assert first.trainer.state.fine_steps == stop_at
    save_checkpoint(tmp_path / "ckpt.pt", first.runner)
    resumed = session(*overrides)
    load_checkpoint(tmp_path / "ckpt.pt", resumed.runner)
    assert resumed.runner.run()

    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert resumed.trainer.state == whole.trainer.state


def test_a_checkpoint_of_another_rival_setting_is_refused(tmp_path):
    source = session("experiment=layer_drop")
    assert not source.runner.run(should_stop=lambda: source.trainer.state.fine_steps >= 2)
    path = save_checkpoint(tmp_path / "ckpt.pt", source.runner)
    with pytest.raises(CheckpointError, match="another plan .*theta_bar=0.5.* there, .*theta_bar=0.7"):
        load_checkpoint(path, session("experiment=layer_drop", "layer_drop.theta_bar=0.7").runner)
