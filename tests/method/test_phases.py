"""The paper's method describes each of its phases whole (which model trains, with which optimizer, LR
and batches, what its rows add, what follows it) and emits only the phases that do something; the
runner executes those descriptions."""

from __future__ import annotations

from helpers import ML, compose_config, typed

from mltrain.method.kinds import BatchStream, PhaseKind, StepKind
from mltrain.method.plan import build_plan
from mltrain.run import build


def kinds(plan) -> list[str]:
    return [str(p.kind) for p in plan]


def test_a_coarse_phase_has_its_own_optimizer_schedule_batches_and_rows():
    plan = build_plan(compose_config(*ML, "multilevel.coarse_optim.lr=0.05", "multilevel.coarse_optimizer_state=reset"))
    fine, coarse = plan[0], plan[3]
    assert kinds(plan[:5]) == ["train", "restrict", "diagnose", "train", "prolong"]
    assert (fine.trains, fine.optimizer, fine.schedule, fine.row_columns, fine.row_every) == ((), None, None, {"cycle": 0}, 1)
    assert coarse.trains == coarse.where() == (0,) and coarse.stands_in_for is None and coarse.step_kind == StepKind.coarse
    assert coarse.batches == BatchStream.coarse and coarse.row_every == 2
    assert coarse.row_columns == {"cycle": 0, "coarse_model": 0}  # its rows name the coarse model it trains
    assert coarse.optimizer.key == (0,) and coarse.optimizer.reset and coarse.optimizer.settings.lr == 0.05
    assert (coarse.schedule.name, coarse.schedule.peak_lr) == ("constant", 0.05)
    assert plan[-1].kind == PhaseKind.train and plan[-1].optimizer is None and not plan[-1].columns


def test_diagnose_phases_only_when_enabled_and_the_fine_reset_is_the_prolongations():
    plan = build_plan(compose_config(*ML, "multilevel.diagnostics=false", "multilevel.fine_momentum_after_prolong=reset"))
    assert PhaseKind.diagnose not in kinds(plan)
    assert {p.reset_fine_optimizer for p in plan if p.kind == PhaseKind.prolong} == {True}
    assert not any(p.reset_fine_optimizer for p in plan if p.kind != PhaseKind.prolong)


def test_the_schedule_control_plans_stand_in_fine_steps_and_no_coarse_model():
    plan = build_plan(compose_config(*ML, "multilevel.control=schedule", "multilevel.fine_momentum_after_prolong=reset",
                                     "model.vocab_size=256"))
    assert set(kinds(plan)) == {"train", "evaluate"}
    stand_ins = [p for p in plan if p.kind == PhaseKind.train and p.where()]
    assert len(stand_ins) == 3 * 2 and {p.trains for p in stand_ins} == {()}
    assert [p.stands_in_for for p in stand_ins[:2]] == [(0,), (1,)]  # the coarse model whose place it takes
    assert {p.step_kind for p in stand_ins} == {StepKind.control} and {p.batches for p in stand_ins} == {BatchStream.coarse}
    assert [p.row_columns["control_for"] for p in stand_ins[:2]] == ["A", "B"]
    assert all(p.reset_fine_optimizer for p in stand_ins) and {p.optimizer.key for p in stand_ins} == {(0,), (1,)}


def test_the_fine_optimizer_is_cleared_after_the_phase_that_says_so():
    session = build(typed(compose_config(*ML, "multilevel.fine_momentum_after_prolong=reset")), lambda row: None)
    runner, at = session.runner, session.runner.position
    first_prolong = next(i for i, p in enumerate(runner.plan) if p.kind == PhaseKind.prolong)
    assert not runner.run(should_stop=lambda: at.phase_index >= first_prolong)
    assert len(runner.fine_optimizer.state) > 0  # the cycle's fine step gave it momentum
    assert not runner.run(should_stop=lambda: at.phase_index > first_prolong)
    assert len(runner.fine_optimizer.state) == 0 and len(runner.own_optimizers[(0,)].state) > 0
