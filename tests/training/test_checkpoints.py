"""Stopping anywhere (mid coarse phase included) and resuming from a checkpoint equals never stopping,
through the Python API; a checkpoint of another model, scheme or plan, or a truncated one, is one clear
error; the folder keeps the newest files and the cadence counts FLOPs inside coarse phases."""

import pytest
import torch
from helpers import compose_config, typed

from mltrain.core.errors import CheckpointError
from mltrain.run import build
from mltrain.training.checkpoint import load_checkpoint, save_checkpoint


PLAN = ["train.max_steps=12", "train.eval_interval=6", "train.eval_tokens=64", "multilevel.n_cycles=3",
        "multilevel.coarse_steps=5"]


def session(*overrides):
    rows = []
    return build(typed(compose_config(*PLAN, *overrides)), rows.append), rows


def steps_taken(s):
    st = s.trainer.state
    return sum(st.steps.values())  # every kind of step


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
    at_stop = first.trainer.clock.elapsed()
    save_checkpoint(tmp_path / "ckpt.pt", first.runner)

    resumed, _ = session(*overrides)
    load_checkpoint(tmp_path / "ckpt.pt", resumed.runner)
    assert resumed.runner.run()

    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert resumed.trainer.state == whole.trainer.state
    assert resumed.trainer.last_loss.keys() == whole.trainer.last_loss.keys()
    assert resumed.trainer.clock.elapsed() >= at_stop  # wall time goes on, not from zero
    assert resumed.runner.streams["fine"].position == whole.runner.streams["fine"].position


# ---------------------------------------------------------------------------------------------
# Checkpoint files: what they belong to


def test_a_checkpoint_from_another_model_scheme_or_plan_is_refused_naming_the_difference(tmp_path):
    source, _ = session("coarsening=evenodd")
    assert not source.runner.run(should_stop=lambda: steps_taken(source) >= 3)
    path = save_checkpoint(tmp_path / "ckpt.pt", source.runner)
    for overrides, needle in [
        (["coarsening=evenodd", "model.n_layer=6"], "another model (model.n_layer=4 there, 6 here)"),
        (["coarsening=evenodd", "model.n_embd=64"], "another model (model.n_embd=32 there, 64 here)"),
        (["coarsening=average", "multilevel.levels=2"], "another scheme (coarsening.scheme='stride' there, 'average' here)"),
        ([], "another scheme (run kind='multilevel' there, 'single' here)"),  # single-level names no keys of its own
        (["coarsening=evenodd", "multilevel.n_cycles=2"], "another plan"),
        (["coarsening=evenodd", "multilevel.coarse_steps=6"], "first difference at phase 3: train coarse 0 x5 (cycle 0) there, train coarse 0 x6 (cycle 0) here"),
    ]:
        other, _ = session(*overrides)
        before = {k: v.clone() for k, v in other.model.state_dict().items()}
        with pytest.raises(CheckpointError) as err:
            load_checkpoint(path, other.runner)
        message = str(err.value)
        assert needle in message and "\n" not in message, message
        assert all(torch.equal(before[k], v) for k, v in other.model.state_dict().items())  # untouched


def test_a_truncated_checkpoint_is_one_clear_error(tmp_path):
    source, _ = session()
    path = save_checkpoint(tmp_path / "ckpt.pt", source.runner)
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_checkpoint(path, session()[0].runner)


def test_checkpoint_folder_keeps_the_newest_and_cadence_counts_flops_in_coarse_phases(tmp_path):
    from mltrain.training.checkpoint import Cadence, CheckpointFolder
    from mltrain.training.trainer import TrainState

    s, _ = session("coarsening=evenodd")
    folder = CheckpointFolder(tmp_path, keep=2)
    for stop in (2, 4, 9):
        s.runner.run(should_stop=lambda stop=stop: steps_taken(s) >= stop)
        folder.save(s.runner)
    assert [p.name for p in folder.files()] == ["step-000001-00000004.pt", "step-000001-00000009.pt"]
    assert folder.latest().name == "step-000001-00000009.pt"

    cadence = Cadence(interval=10, fine_step_flops=100.0)
    assert cadence.due("fine", TrainState(steps={"fine": 10})) and not cadence.due("fine", TrainState(steps={"fine": 11}))
    assert not cadence.due("coarse", TrainState(steps={"fine": 11}, flops=999.0))
    assert cadence.due("coarse", TrainState(steps={"fine": 11}, flops=1000.0))
    cadence.mark(TrainState(flops=1000.0))
    assert not cadence.due("coarse", TrainState(flops=1999.0)) and cadence.due("control", TrainState(flops=2000.0))
    assert not Cadence(0, 100.0).due("fine", TrainState(steps={"fine": 10}))
