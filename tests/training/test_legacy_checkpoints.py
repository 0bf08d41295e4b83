"""Checkpoints written before the counters became one mapping by step kind (and before a method's own
objects moved into its parts, and the runner its plan position) still resume exactly: a file of that
layout — a `<kind>_steps` field per step kind, `coarse_flops` and the plan position (`phase_index`,
`step_in_phase`) in the train state, the own optimizers under `coarse_optimizers`, every run's
`coarse_storage`, `diag_index` and `coarse` stream, and the scheme keys every method recorded — loads into
today's runner and the run ends with the weights of an uninterrupted one."""

from __future__ import annotations

import pytest
import torch
from helpers import compose_config, typed

from mltrain.run import build
from mltrain.training.checkpoint import load_checkpoint, save_checkpoint
from mltrain.training.runner import PlanPosition
from mltrain.training.trainer import TrainState

ML = ["coarsening=evenodd", "multilevel.n_cycles=2", "multilevel.coarse_steps=4", "multilevel.coarse_log_interval=2"]


def earlier_layout(payload: dict, kinds: tuple[str, ...] = ("fine", "coarse", "control")) -> dict:
    """`payload` (today's) as the code before the change wrote it."""
    runner = payload["runner"]
    state = dict(runner["train_state"])
    steps, kind_flops = state.pop("steps"), state.pop("kind_flops")
    for kind in kinds:
        state[f"{kind}_steps"] = steps.get(kind, 0)
    state["coarse_flops"] = kind_flops.get("coarse", 0.0)
    state["eval_flops"] = runner.pop("eval_flops")  # the measurers' counters were train state then
    state["diag_flops"] = runner.pop("diag_flops", 0.0)
    state.update(runner.pop("position"))  # the plan position was the train state's then
    runner["train_state"] = state
    runner["coarse_optimizers"] = runner.pop("own_optimizers")
    runner.setdefault("coarse_storage", {})
    runner.setdefault("diag_index", 0)
    runner["samplers"].setdefault("coarse", {"position": 0})
    scheme = payload["identity"]["scheme"]
    scheme.setdefault("coarsening.scheme", "none")
    for key, value in (("coarsening.k", 2), ("coarsening.step_scale", "one"), ("multilevel.levels", 2)):
        scheme.setdefault(key, value)
    return payload


def test_the_earlier_train_state_reads_into_the_mappings():
    s = TrainState.from_state({"fine_steps": 7, "coarse_steps": 4, "control_steps": 0, "tokens": 10, "flops": 5.0,
                               "coarse_flops": 2.0, "flops_blocks": 4.0, "skipped_steps": 0})
    assert s.steps == {"fine": 7, "coarse": 4, "control": 0} and s.kind_flops == {"coarse": 2.0}
    assert (s.fine_steps, s.optimizer_steps) == (7, 11)
    assert TrainState.from_state(s.state_dict()) == s
    with pytest.raises(KeyError, match="unknown train state entry"):
        TrainState.from_state({"fine_steps": 1, "cycle": 2})


@pytest.mark.parametrize("overrides,stop", [(ML, 6), (["depth_method=layer_drop", "layer_drop.gamma=0.3"], 5), ([], 5)])
def test_an_earlier_checkpoint_resumes_exactly(tmp_path, overrides, stop):
    cfg = lambda: typed(compose_config(*overrides))  # noqa: E731
    whole = build(cfg(), lambda row: None)
    assert whole.runner.run()
    first = build(cfg(), lambda row: None)
    assert not first.runner.run(should_stop=lambda: first.trainer.state.optimizer_steps >= stop)
    path = save_checkpoint(tmp_path / "ckpt.pt", first.runner)
    torch.save(earlier_layout(torch.load(path, weights_only=True)), path)
    resumed = build(cfg(), lambda row: None)
    load_checkpoint(path, resumed.runner)
    assert resumed.trainer.state.optimizer_steps == stop and resumed.evaluator.flops == first.evaluator.flops
    assert resumed.runner.position == first.runner.position != PlanPosition()  # read from the train state
    assert resumed.runner.parts.measured_flops() == first.runner.parts.measured_flops()
    assert resumed.runner.run()
    counted = lambda state: {kind: n for kind, n in state.steps.items() if n}  # noqa: E731 (the earlier zeros)
    assert counted(resumed.trainer.state) == counted(whole.trainer.state)
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_the_runner_owns_its_position(tmp_path):
    """Today's checkpoint keeps the plan position as the runner's own entry, not among the trainer's
    counters; the trainer's state has no position at all."""
    session = build(typed(compose_config(*ML)), lambda row: None)
    runner = session.runner
    assert not runner.run(should_stop=lambda: session.trainer.state.optimizer_steps >= 6)
    saved = runner.state_dict()
    at = saved["position"]  # the fine step, coarse model A's 4, then B's first: step 1 of B's phase
    phase = runner.plan[at["phase_index"]]
    assert (phase.kind, phase.trains, at["step_in_phase"]) == ("train", (1,), 1)
    assert not {"phase_index", "step_in_phase"} & set(saved["train_state"])
    assert not hasattr(session.trainer.state, "phase_index")
