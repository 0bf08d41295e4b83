"""A new rival with a new kind of phase, from one module (this file) and one yaml (its preset,
tests/method/conf/experiment/shrink_perturb.yaml, found through hydra.searchpath): the method and its
plan, the phase's own fields and its handler (torch code, registered into the runner's registry from
here), then a run end to end through mltrain.run.run, the rows the phase writes, and an exact resume."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import compose_config, read_rows, typed

from mltrain.config import register_configs, validate
from mltrain.core.errors import ConfigError
from mltrain.method import registry
from mltrain.method.coarsening import scheme_class
from mltrain.method.kinds import RunKind
from mltrain.method.plan import Phase, TrainPhase, build_plan, run_kind
from mltrain.method.registry import DepthMethod, register_method
from mltrain.run import build, run
from mltrain.training import runner as runner_module
from mltrain.training.checkpoint import load_checkpoint, save_checkpoint
from mltrain.training.runner import phase_handler

SEARCHPATH = f"hydra.searchpath=[file://{Path(__file__).parent / 'conf'}]"
KIND = "shrink_perturb"


@dataclass(frozen=True)
class ShrinkPerturb(Phase):
    """Every weight w becomes shrink·w + noise·N(0, 1) (Ash & Adams, NeurIPS 2020), seeded by the run."""

    shrink: float = 1.0
    noise: float = 0.0


class ShrinkAndPerturb(DepthMethod):
    """The fine model for half the run, shrunk and perturbed, then the fine model again (its optimizer's
    state cleared by the phase: the generic after-phase action)."""

    name = "shrink_perturb"
    SHRINK, NOISE = 0.5, 0.001

    def check_config(self, total_steps: int) -> None:
        if scheme_class(self.cfg.coarsening.scheme).coarsens:
            raise ConfigError("depth_method=shrink_perturb trains the fine model alone: use coarsening=none")
        if total_steps < 2:
            raise ConfigError(f"depth_method=shrink_perturb needs 2 fine steps or more (it has {total_steps})")

    def plan(self, total_steps: int) -> list[Phase]:
        half = total_steps // 2
        return [TrainPhase(steps=half),
                ShrinkPerturb(KIND, shrink=self.SHRINK, noise=self.NOISE, reset_fine_optimizer=True),
                TrainPhase(steps=total_steps - half, columns=(("shrunk", True),))]


def shrink_and_perturb(ctx, phase: ShrinkPerturb) -> bool:
    """The handler: the weights changed in place, and one row of their norm before and after."""
    generator = torch.Generator().manual_seed(ctx.seed)
    params = list(ctx.model.parameters())
    with torch.no_grad():
        before = torch.sqrt(sum((p.float() ** 2).sum() for p in params)).item()
        for p in params:
            noise = torch.randn(p.shape, generator=generator).to(p.device, p.dtype)
            p.mul_(phase.shrink).add_(noise, alpha=phase.noise)
        after = torch.sqrt(sum((p.float() ** 2).sum() for p in params)).item()
    ctx.emit({"step": ctx.step, "shrink/norm_before": before, "shrink/norm_after": after, **ctx.counters()})
    return True


@pytest.fixture(autouse=True)
def new_rival():
    """Registered for these tests only (the other test files see the built-in methods and phases alone)."""
    register_method(ShrinkAndPerturb)
    phase_handler(KIND)(shrink_and_perturb)
    register_configs()
    yield
    del registry._METHODS[ShrinkAndPerturb.name]
    del runner_module.PHASE_HANDLERS[KIND]
    register_configs()


def test_the_preset_chooses_the_new_rival_and_its_plan_has_the_new_phase():
    cfg = compose_config(SEARCHPATH, "experiment=shrink_perturb")
    validate(typed(cfg))
    assert run_kind(cfg) is RunKind.shrink_perturb and cfg.preset == "shrink_perturb"
    plan = build_plan(cfg)
    assert [(str(p.kind), getattr(p, "steps", 0)) for p in plan] == [("train", 12), (KIND, 0), ("train", 12)]
    assert plan[1] == ShrinkPerturb(KIND, shrink=0.5, noise=0.001, reset_fine_optimizer=True)
    with pytest.raises(ConfigError, match="needs 2 fine steps or more"):
        validate(typed(compose_config(SEARCHPATH, "experiment=shrink_perturb", "train.max_steps=1")))


def test_the_new_rival_runs_end_to_end_and_its_phase_changes_the_weights(tmp_path):
    run(typed(compose_config(SEARCHPATH, "experiment=shrink_perturb")), run_dir=tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["run_kind"] == "shrink_perturb"
    assert summary["fine_steps"] == 24 and math.isfinite(summary["final_val_loss"])
    rows = read_rows(tmp_path / "run")
    shrunk = [r for r in rows if "shrink/norm_before" in r]
    assert len(shrunk) == 1 and shrunk[0]["step"] == 12
    assert shrunk[0]["shrink/norm_after"] == pytest.approx(0.5 * shrunk[0]["shrink/norm_before"], rel=0.05)
    train = [r for r in rows if "train/loss" in r]
    assert {r.get("shrunk", False) for r in train if r["step"] <= 12} == {False}
    assert {r.get("shrunk", False) for r in train if r["step"] > 12} == {True}


def test_the_new_rival_resumes_exactly_across_its_phase(tmp_path):
    cfg = lambda: compose_config(SEARCHPATH, "experiment=shrink_perturb")  # noqa: E731
    whole = build(typed(cfg()), lambda row: None)
    assert whole.runner.run()
    first = build(typed(cfg()), lambda row: None)
    assert not first.runner.run(should_stop=lambda: first.trainer.state.fine_steps >= 12)  # before the phase
    save_checkpoint(tmp_path / "ckpt.pt", first.runner)
    resumed = build(typed(cfg()), lambda row: None)
    load_checkpoint(tmp_path / "ckpt.pt", resumed.runner)
    assert resumed.runner.run()
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_phase_kind_without_a_handler_is_refused_before_any_step():
    del runner_module.PHASE_HANDLERS[KIND]
    try:
        with pytest.raises(ConfigError, match=f"phases of kind {KIND} that have no handler"):
            build(typed(compose_config(SEARCHPATH, "experiment=shrink_perturb")), lambda row: None)
    finally:
        phase_handler(KIND)(shrink_and_perturb)
