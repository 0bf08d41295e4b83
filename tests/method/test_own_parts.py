"""A method owns its objects and counters: one defined here alone adds a batch stream of its own (its build
hook's parts), a kind of step of its own (counted in the run's one mapping of steps by kind) and its own
summary fields, with no file of mltrain edited; it trains end to end, resumes exactly, and a run of it
writes nothing of another method's (no multilevel field)."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import compose_config, typed

from mltrain.config import register_configs
from mltrain.method import registry
from mltrain.method.plan import Phase, TrainPhase
from mltrain.method.registry import DepthMethod, register_method
from mltrain.run import build
from mltrain.training.checkpoint import load_checkpoint, save_checkpoint
from mltrain.training.parts import BuildKit, Parts

WARM = "warm"  # the method's own kind of step, on its own batch stream


class WarmParts(Parts):
    """A stream of its own, seeded apart from the fine one."""

    def __init__(self, method: DepthMethod, kit: BuildKit):
        super().__init__(kit)
        self.streams = {WARM: kit.stream(kit.cfg.train.batch_size, kit.cfg.seed + 77)}


class WarmStart(DepthMethod):
    """Three steps of the fine model on its own stream (counted as `warm` steps, not fine ones), then
    single-level training."""

    name = "warm_start"
    parts = f"{__name__}:WarmParts"

    def plan(self, total_steps: int) -> list[Phase]:
        return [TrainPhase(steps=3, batches=WARM, step_kind=WARM), TrainPhase(steps=total_steps)]

    def summary_fields(self, state, fine_step_flops: float) -> dict:
        return {"warm_steps": state.steps.get(WARM, 0), "warm_flops": state.kind_flops.get(WARM, 0.0)}


@pytest.fixture(autouse=True)
def warm_method():
    register_method(WarmStart)
    register_configs()
    yield
    del registry._METHODS[WarmStart.name]
    register_configs()


def test_its_own_stream_step_kind_and_summary_fields(train_run):
    rows, summary = train_run("depth_method=warm_start")
    assert summary["status"] == "finished" and summary["run_kind"] == "warm_start"
    assert summary["fine_steps"] == 24 and summary["warm_steps"] == 3 and summary["warm_flops"] > 0
    assert math.isclose(summary["total_flops"], summary["warm_flops"] * 9)  # 24 + 3 steps of one cost
    assert not {"delta", "coarse_steps", "control_steps", "coarse_flops"} & set(summary)
    warm = [r for r in rows if r.get("phase") == WARM]
    assert warm and all(r["step"] == 0 and "coarse_model" not in r for r in warm)


def test_its_stream_is_its_own_and_is_resumed(tmp_path):
    cfg = lambda: typed(compose_config("depth_method=warm_start"))  # noqa: E731
    whole = build(cfg(), lambda row: None)
    assert set(whole.runner.streams) == {"fine", WARM}
    assert whole.runner.run()
    assert whole.runner.streams[WARM].position == 3 and whole.trainer.state.steps == {WARM: 3, "fine": 24}
    first = build(cfg(), lambda row: None)
    assert not first.runner.run(should_stop=lambda: first.trainer.state.steps.get(WARM, 0) >= 2)  # inside it
    save_checkpoint(tmp_path / "ckpt.pt", first.runner)
    resumed = build(cfg(), lambda row: None)
    load_checkpoint(tmp_path / "ckpt.pt", resumed.runner)
    assert resumed.runner.streams[WARM].position == 2
    assert resumed.runner.run()
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_phase_on_a_stream_the_run_does_not_build_is_refused_before_any_step(monkeypatch):
    from mltrain.core.errors import ConfigError

    monkeypatch.setattr(WarmStart, "parts", None)
    with pytest.raises(ConfigError, match="batch stream"):
        build(typed(compose_config("depth_method=warm_start")), lambda row: None)


def test_a_train_phase_that_is_no_train_record_is_refused_before_any_step(monkeypatch):
    """A train phase is a TrainPhase (its steps, model, optimizer, LR, batches): the bare Phase record of
    kind `train` says none of that, and the run stops at build with one line."""
    from mltrain.core.errors import ConfigError

    monkeypatch.setattr(WarmStart, "plan", lambda self, total_steps: [Phase("train"), TrainPhase(steps=total_steps)])
    with pytest.raises(ConfigError, match="no TrainPhase"):
        build(typed(compose_config("depth_method=warm_start")), lambda row: None)
