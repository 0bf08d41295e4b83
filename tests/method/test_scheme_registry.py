"""A new coarsening scheme is one class and one registration, here in the test file alone: validation,
the plan, the views, restriction/prolongation and the FLOP accounting all take it from the registry."""

import pytest
import torch

from helpers import typed
from mltrain.core.errors import CoarseningError
from mltrain.method.coarsening import Groups, Scheme, register_scheme, scheme_names
from mltrain.method.plan import build_plan, train_phases
from mltrain.run import build


@register_scheme
class Contiguous(Scheme):
    """k coarse models, each one contiguous slice of the depth: [0, n/k), [n/k, 2n/k), … Each coarse
    block stands for itself alone (so prolongation mixes nothing)."""

    name = "contiguous"
    uniform_steps = False  # step_scale=stride would not mean "same depth": refused

    def partition(self, n_parent: int, seed) -> list[Groups]:
        size = n_parent // self.k
        return [[(i,) for i in range(r * size, (r + 1) * size)] for r in range(self.k)]


EXTRA = ["model.n_layer=6", "coarsening.scheme=contiguous", "coarsening.name=contiguous", "coarsening.k=3",
         "multilevel.n_cycles=2", "multilevel.coarse_steps=3", "multilevel.coarse_log_interval=1"]


def test_registered_scheme_is_known_to_validation(make_config):
    from mltrain.config import validate

    assert "contiguous" in scheme_names()
    validate(typed(make_config(*EXTRA)))
    with pytest.raises(CoarseningError, match="model.n_layer=4 is not divisible by coarsening.k=3"):
        validate(typed(make_config(*EXTRA, "model.n_layer=4")))
    with pytest.raises(CoarseningError, match="contiguous scheme's are not"):
        validate(typed(make_config(*EXTRA, "coarsening.step_scale=stride")))


def test_plan_trains_every_coarse_model_of_the_new_scheme(make_config):
    cfg = make_config(*EXTRA)
    cfg.model.vocab_size = 256
    trained = [p.trains for p in train_phases(build_plan(cfg)) if p.trains]
    assert trained == [(0,), (1,), (2,)] * 2


def test_new_scheme_trains_end_to_end_and_only_its_blocks_move(train_run, make_config):
    rows, s = train_run(*EXTRA)
    assert s["run_kind"] == "multilevel" and s["coarsening"] == "contiguous"
    assert s["coarse_steps"] == 2 * 3 * 3 and s["fine_steps"] == 24
    coarse = [r for r in rows if r.get("phase") == "coarse"]
    assert {r["coarse_model"] for r in coarse} == {0, 1, 2}
    # a coarse step of a 2-block slice costs what a 2-block model costs
    ml = [r for r in rows if "flops" in r]
    assert s["coarse_flops"] > 0 and ml[-1]["flops"] == s["total_flops"]

    # Training coarse model 1 touches blocks 2 and 3 only; its prolongation changes nothing.
    session = build(typed(make_config(*EXTRA)), lambda row: None)
    h = session.runner.parts.hierarchy
    view = h.view((1,))
    before = [b.state_dict() for b in session.model.blocks]
    before = [{k: v.clone() for k, v in sd.items()} for sd in before]
    opt = torch.optim.SGD(view.parameters(), lr=0.1)
    x = torch.randint(0, 256, (2, 16))
    view(x, x)[1].backward()
    opt.step()
    h.prolong(view)
    moved = [i for i, b in enumerate(session.model.blocks)
             if any(not torch.equal(v, before[i][k]) for k, v in b.state_dict().items())]
    assert moved == [2, 3]
