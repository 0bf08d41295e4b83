"""train.compile on CPU: how many graphs each method makes, counted with dynamo's own counters over several
cycles or stages (the aot_eager backend: the same graphs as inductor, compiled in seconds). One graph per
depth: the fine model, one shared by the coarse models of a level, evaluation; one per path length for
RaPTr; one per depth for stacking; one per kept-block count for layer dropping, its 1/p a tensor input;
later cycles compile nothing. Reaching dynamo's recompile limit stops the run in one line. The CUDA
variant is in test_cuda.py."""

import pytest
import torch
from helpers import compose_config, typed
from torch._dynamo.utils import counters

from mltrain.method.kinds import PhaseKind
from mltrain.run import build
from mltrain.training.compiling import CompileLimitError

TINY = ["model.n_layer=4", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=4",
        "train.max_steps=24", "train.eval_interval=4", "train.eval_tokens=64", "train.progress=false",
        "device=cpu", "train.compile=true"]
ML = ["coarsening=evenodd", "multilevel.n_cycles=3", "multilevel.coarse_steps=2"]


@pytest.fixture(autouse=True)
def _fast_backend(monkeypatch):
    monkeypatch.setenv("MLTRAIN_COMPILE_BACKEND", "aot_eager")


def graphs() -> tuple[int, int]:
    """(graphs compiled, frames compiled): equal when no frame was compiled twice or broken up."""
    return counters["stats"]["unique_graphs"], counters["frames"]["ok"]


def session(*overrides: str):
    session = build(typed(compose_config(*TINY, *overrides, tiny=False)), lambda row: None)  # resets dynamo
    counters.clear()
    return session


def train_depths(session) -> set:
    """The (blocks, scaled) of every training step the plan takes: what a train graph is keyed on."""
    runner, seen, start = session.runner, set(), 0
    for phase in runner.plan:
        if phase.kind != PhaseKind.train:
            continue
        if phase.paths is None:
            view = runner.view_for(phase)
            seen.add((view.n_blocks, isinstance(view.step_size, tuple)))
        else:  # a sub-path policy draws from the run's fine step count
            seen |= {(len(sub.blocks), sub.scales is not None)
                     for sub in map(phase.paths.path, range(start, start + phase.steps))}
        start += phase.steps
    return seen


def test_multilevel_compiles_the_fine_model_one_coarse_graph_and_evaluation_once():
    s = session(*ML)
    runner, state = s.runner, s.trainer.state
    first_eval = next(i for i, p in enumerate(runner.plan) if p.kind == "evaluate")
    s.evaluator.log_eval(runner.fine)
    assert not runner.run(should_stop=lambda: runner.position.phase_index > first_eval)  # cycle 0, all its phases
    # The fine model (train and eval mode) and one graph for both coarse models: A and B run 2 blocks
    # each, and dynamo guards on how many blocks run, not on which.
    assert graphs() == (3, 3)
    assert runner.run()  # cycles 1 and 2 (restrict, diagnostics, coarse A and B, prolong), fine steps, evals
    assert graphs() == (3, 3)
    assert state.steps["coarse"] == 3 * 2 * 2 and state.fine_steps == 24


def test_three_levels_and_a_redrawn_random_scheme_compile_one_graph_per_depth():
    s = session(*ML, "multilevel.levels=3")  # 4 -> 2 -> 1 blocks
    s.evaluator.log_eval(s.runner.fine)
    assert s.runner.run() and graphs() == (4, 4)
    s = session("coarsening=random", "coarsening.redraw=true", "multilevel.n_cycles=3", "multilevel.coarse_steps=2")
    s.evaluator.log_eval(s.runner.fine)
    assert s.runner.run() and graphs() == (3, 3)  # other blocks every cycle, the same depth


@pytest.mark.parametrize("method,extra", [
    ("layer_drop", ["layer_drop.gamma=0.3"]),  # rescale=true: 1/p a tensor, one graph per kept count
    ("layer_drop", ["layer_drop.gamma=0.3", "layer_drop.rescale=false"]),
    ("raptr", []),  # stages of 2, 3, 3 and 4 blocks: one graph per length
    ("raptr", ["raptr.rescale=false"]),
    ("stacking", ["stacking.grow_at=[0.25,0.5]", "stacking.factor=2", "model.n_layer=4"]),  # 1, 2, 4 blocks
])
def test_a_rival_method_compiles_one_graph_per_depth_it_trains(method, extra):
    s = session(f"experiment={method}", *extra, "train.eval_interval=100")
    expected = len(train_depths(s)) + 1  # and the whole model's evaluation
    s.evaluator.log_eval(s.runner.fine)
    assert s.runner.run()
    assert graphs() == (expected, expected)
    assert expected <= s.model.config.n_layer + 2  # at most a graph per depth (0 ... L blocks) and evaluation
    if method == "layer_drop":  # several kept counts were drawn, each compiled once, whatever its 1/p
        assert expected >= 3


def test_layer_dropping_with_rescale_trains_under_compile_as_without():
    eager = build(typed(compose_config(*TINY, "train.compile=false", "experiment=layer_drop", "layer_drop.gamma=0.3",
                                 tiny=False)), lambda row: None)
    compiled = session("experiment=layer_drop", "layer_drop.gamma=0.3")
    for s in (eager, compiled):
        s.runner.run()
    a, b = eager.model.state_dict(), compiled.model.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_reaching_dynamos_recompile_limit_stops_the_run_in_one_line():
    s = session("experiment=layer_drop", "layer_drop.gamma=0.3")
    # dynamo's own patch: pytest's monkeypatch undoes a config module's attribute by deleting it, which
    # hides the setting from every later compile in this process
    with torch._dynamo.config.patch(recompile_limit=1), pytest.raises(CompileLimitError) as err:
        s.runner.run()
    assert "recompile limit" in str(err.value) and "train.compile=false" in str(err.value)
    assert "\n" not in str(err.value)
