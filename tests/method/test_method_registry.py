"""A new depth method is one class and one registration, here in the test file alone: the run kind, the
label's sections, `depth_method=`'s values, validation, the plan, training, the summary and resume all
take it from the registry."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from hydra.errors import ConfigCompositionException
from helpers import compose_config, typed

from mltrain.config import register_configs, validate
from mltrain.core.errors import ConfigError
from mltrain.method import registry
from mltrain.method.kinds import PhaseKind, RunKind
from mltrain.method.paths import PathPolicy, Stage, SubPath
from mltrain.method.plan import build_plan, run_kind
from mltrain.method.registry import register_method
from mltrain.method.rivals import Rival
from mltrain.run import build
from mltrain.runs.keys import METHOD_KEYS, unread_keys
from mltrain.runs.names import run_label
from mltrain.training.checkpoint import load_checkpoint, save_checkpoint


@dataclass(frozen=True)
class Backwards(PathPolicy):
    """Every block, last to first."""

    n_layer: int

    def path(self, step: int) -> SubPath:
        return SubPath(tuple(reversed(range(self.n_layer))))


class Reversed(Rival):
    """The fine model's blocks run backwards for the first half of the run, then the fine model."""

    name = "reversed"

    def stages(self, total_steps: int) -> list[Stage]:
        half = total_steps // 2
        return [Stage(half, Backwards(self.cfg.model.n_layer)), Stage(total_steps - half)]

    def check_keys(self, total_steps: int) -> None:
        if total_steps < 2:
            raise ConfigError(f"depth_method=reversed needs 2 fine steps or more (it has {total_steps})")


@pytest.fixture(autouse=True)
def reversed_method():
    """Registered for these tests only (the other test files see the built-in methods alone)."""
    register_method(Reversed)
    register_configs()
    yield
    del registry._METHODS[Reversed.name]
    register_configs()


def test_a_registered_method_is_a_run_kind_that_reads_its_own_sections():
    assert list(RunKind)[-1] is RunKind.reversed and RunKind("reversed") == "reversed"
    assert METHOD_KEYS[RunKind.reversed] == () and set(METHOD_KEYS) == set(RunKind)
    assert {"multilevel", "coarsening", "stacking"} <= set(unread_keys("reversed"))
    assert run_label(["optim.lr=0.1", "multilevel.n_cycles=8", "seed=3"], "reversed") == "optim.lr=0.1"


def test_depth_method_takes_the_new_name_and_still_refuses_others():
    cfg = compose_config("depth_method=reversed")
    assert run_kind(cfg) is RunKind.reversed
    validate(typed(cfg))
    with pytest.raises(ConfigCompositionException) as info:
        compose_config("depth_method=backwards")
    assert "[none, stacking, layer_drop, raptr, reversed]" in str(info.value) + str(info.value.__cause__)


@pytest.mark.parametrize("overrides,needle", [
    (["train.max_steps=1"], "depth_method=reversed needs 2 fine steps or more (it has 1)"),
    (["coarsening=evenodd"], "depth_method=reversed trains sub-paths of the fine model itself"),
])
def test_the_new_methods_checks_run_in_validate(overrides, needle):
    with pytest.raises(ConfigError) as info:
        validate(typed(compose_config("depth_method=reversed", *overrides)))
    assert needle in str(info.value)


def test_the_plan_is_the_new_methods_stages():
    plan = build_plan(compose_config("depth_method=reversed"))
    assert [(p.kind, p.steps, p.paths) for p in plan] == [(PhaseKind.train, 12, Backwards(4)), (PhaseKind.train, 12, None)]


def test_a_registered_method_trains_end_to_end_and_resumes_exactly(train_run, tmp_path):
    rows, summary = train_run("depth_method=reversed")
    assert summary["status"] == "finished" and summary["run_kind"] == "reversed" and summary["fine_steps"] == 24
    assert math.isfinite(summary["final_val_loss"]) and not {"delta", "coarse_steps"} & set(summary)  # none of multilevel's
    assert {r["blocks"] for r in rows if "train/loss" in r} == {4.0}

    whole = build(typed(compose_config("depth_method=reversed")), lambda row: None)
    assert whole.runner.run()
    first = build(typed(compose_config("depth_method=reversed")), lambda row: None)
    assert not first.runner.run(should_stop=lambda: first.trainer.state.fine_steps >= 6)
    save_checkpoint(tmp_path / "ckpt.pt", first.runner)
    resumed = build(typed(compose_config("depth_method=reversed")), lambda row: None)
    load_checkpoint(tmp_path / "ckpt.pt", resumed.runner)
    assert resumed.runner.run()
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
