"""Views are exact: a coarse model is the fine model's own blocks (or, for `average`, blocks of its
own) between its embeddings and head; training one changes exactly its blocks; restriction and
δ-prolongation move exactly the weights they should, at every level; a sub-path's blocks take their own
Euler steps."""

import types

import pytest
import torch
from omegaconf import OmegaConf

from mltrain.method.coarsening import scheme_class
from mltrain.method.paths import SubPath
from mltrain.model.gpt import GPT, GPTConfig
from mltrain.training.optim import build_optimizer
from mltrain.training.trainer import Trainer
from mltrain.model.views import Hierarchy
from mltrain.model.views import path_view


CFG = dict(vocab_size=64, n_layer=12, n_embd=32, n_head=2, block_size=8)


def scheme(name, k=2, redraw=False, step_scale="unit"):
    return scheme_class(name)(k=k, redraw=redraw, step_scale=step_scale)


def partition(name, k, n, seed=(0,)):
    return scheme(name, k).partition(n, seed)


def hierarchy(model, name, k, delta, seed=0, redraw=False, step_scale="unit"):
    return Hierarchy(model, scheme(name, k, redraw, step_scale), delta, seed=seed)


def make_model(n_layer=12, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**CFG, "n_layer": n_layer}))


def selected(groups):
    return [g[0] for g in groups]


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_coarse_forward_equals_a_standalone_model_of_the_selected_blocks():
    model = make_model()
    h = hierarchy(model, "stride", 2, 0.25)
    idx = torch.randint(0, 64, (3, 8))
    for path, expected in (((0,), [0, 2, 4, 6, 8, 10]), ((1,), [1, 3, 5, 7, 9, 11])):
        view = h.view(path)
        assert selected(view.groups) == expected
        # An independently built 6-block GPT holding copies of the selected blocks.
        small = GPT(GPTConfig(**{**CFG, "n_layer": 6}))
        state = {k: v for k, v in model.state_dict().items() if not k.startswith("blocks.")}
        for j, i in enumerate(expected):
            for k, v in model.blocks[i].state_dict().items():
                state[f"blocks.{j}.{k}"] = v
        small.load_state_dict(state)
        assert torch.equal(view(idx)[0], small(idx)[0])  # bitwise
        assert all(b is model.blocks[i] for b, i in zip(view.blocks, expected))  # no copies


def test_random_is_reproducible_per_seed_and_differs_between_seeds():
    assert partition("random", 2, 12, seed=[1, 0]) == partition("random", 2, 12, seed=[1, 0])
    draws = {str(partition("random", 2, 12, seed=[s, 0])) for s in range(5)}
    assert len(draws) > 1
    model = make_model()
    fixed = hierarchy(model, "random", 2, 0.25, seed=3)
    assert fixed.view((0,), cycle=0).groups == fixed.view((0,), cycle=5).groups
    redraw = hierarchy(model, "random", 2, 0.25, seed=3, redraw=True)
    assert len({str(redraw.view((0,), cycle=c).groups) for c in range(6)}) > 1


class ListSampler:
    def __init__(self, batches):
        self.batches = batches

    def next_batch(self):
        return self.batches.pop(0)


def train_view(model, view, steps=3):
    train_cfg = types.SimpleNamespace(grad_accum=1, grad_clip=1.0, progress=False, eval_tokens=64, on_nonfinite="stop")
    trainer = Trainer(model, train_cfg, torch.device("cpu"), None, lambda row: None)
    params = list(model.parameters()) + ([p for b in view.blocks for p in b.parameters()] if view.owns_blocks else [])
    sgd = OmegaConf.create({"name": "sgd", "lr": 0.5, "momentum": 0.9, "nesterov": False, "weight_decay": 0.0})
    opt = build_optimizer(params, sgd, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, 64, (4, 8), generator=g), torch.randint(0, 64, (4, 8), generator=g))
               for _ in range(steps)]
    sampler = ListSampler(batches)
    for _ in range(steps):
        trainer.train_step(view, opt, 0.5, sampler, "coarse")
    trainer.close()


def changed_blocks(before, model):
    after = model.state_dict()
    return sorted({int(k.split(".")[1]) for k in after if k.startswith("blocks.") and not torch.equal(before[k], after[k])})


def test_training_a_coarse_model_changes_exactly_its_blocks_and_the_shared_modules():
    model = make_model()
    view = hierarchy(model, "stride", 2, 0.25).view((1,))
    before = snapshot(model)
    train_view(model, view)
    assert changed_blocks(before, model) == [1, 3, 5, 7, 9, 11]
    after = model.state_dict()
    for key in ("wte.weight", "wpe.weight"):
        assert not torch.equal(before[key], after[key])


@pytest.mark.parametrize("delta", [0.0, 0.25, 0.5, 1.0])
def test_prolongation_mixes_exactly_the_covered_blocks(delta):
    model = make_model()
    h = hierarchy(model, "stride", 2, delta)
    view = h.view((1,))  # odd blocks; each covers the even block after it; block 0 is before all
    train_view(model, view)
    before = snapshot(model)
    h.prolong(view)
    assert changed_blocks(before, model) == ([] if delta == 0 else [2, 4, 6, 8, 10])
    after = model.state_dict()
    for j in range(12):
        for name in [k for k in after if k.startswith(f"blocks.{j}.")]:
            if j in (2, 4, 6, 8, 10):
                coarse = before[name.replace(f"blocks.{j}.", f"blocks.{j - 1}.", 1)]
                expected = (1 - delta) * before[name] + delta * coarse
                if delta in (0.0, 1.0):
                    assert torch.equal(after[name], before[name] if delta == 0 else coarse)
                else:
                    torch.testing.assert_close(after[name], expected, rtol=1e-6, atol=1e-7)
            else:
                assert torch.equal(after[name], before[name])  # selected blocks and block 0 untouched


def test_average_restriction_and_interpolation_are_exact():
    model = make_model()
    h = hierarchy(model, "average", 3, 0.25)
    view = h.view((0,))
    assert view.owns_blocks and view.groups == [(0, 1, 2), (3, 4, 5), (6, 7, 8), (9, 10, 11)]
    assert all(b is not fb for b in view.blocks for fb in model.blocks)
    h.restrict(view)
    for coarse, group in zip(view.blocks, view.groups):
        for name, p in coarse.named_parameters():
            mean = torch.stack([model.blocks[j].get_parameter(name) for j in group]).mean(0)
            assert torch.equal(p, mean)
    before_fine = snapshot(model)
    train_view(model, view)
    assert changed_blocks(before_fine, model) == []  # coarse storage trained, fine blocks untouched
    before = snapshot(model)
    h.prolong(view)
    after = model.state_dict()
    for i, group in enumerate(view.groups):
        for j in group:
            for name, p in view.blocks[i].named_parameters():
                key = f"blocks.{j}.{name}"
                torch.testing.assert_close(after[key], 0.75 * before[key] + 0.25 * p.detach(), rtol=1e-6, atol=1e-7)


def test_three_levels_are_views_of_views():
    model = make_model()
    h = hierarchy(model, "stride", 2, 0.5)
    leaf = h.view((1, 0))
    assert leaf.parent is h.view((1,)) and leaf.level == 2
    assert [next(i for i, fb in enumerate(model.blocks) if fb is b) for b in leaf.blocks] == [1, 5, 9]
    # prolonging level 2 into level 1 mixes only level-1 blocks (3, 7, 11), positions within the parent
    before = snapshot(model)
    with torch.no_grad():
        for b in leaf.blocks:
            for p in b.parameters():
                p.add_(1.0)
    h.prolong(leaf)
    assert changed_blocks(before, model) == [1, 3, 5, 7, 9, 11]


# -- the ODE step option (coarsening.step_scale=stride) ----------------------------------------------


def euler_reference(model, block_ids, h, idx):
    """A hand-built coarse model: x <- x + h * (attention + MLP) for each listed fine block, written out
    from the block's sub-modules, between the shared embeddings and head."""
    x = model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))
    for i in block_ids:
        b = model.blocks[i]
        a = b.attn(b.ln_1(x))
        x = x + h * (a + b.mlp(b.ln_2(x + a)))
    return model.lm_head(model.ln_f(x))


@pytest.mark.parametrize("name,k,path,blocks,h", [
    ("stride", 2, (0,), [0, 2, 4, 6, 8, 10], 2.0),
    ("stride", 2, (1,), [1, 3, 5, 7, 9, 11], 2.0),
    ("stride", 3, (2,), [2, 5, 8, 11], 3.0),
    ("stride", 2, (1, 0), [1, 5, 9], 4.0),  # level 2: 12 -> 6 -> 3 blocks, steps of 2 x 2
])
def test_step_scale_stride_is_an_euler_step_of_size_k(name, k, path, blocks, h):
    model = make_model()
    view = hierarchy(model, name, k, 0.25, step_scale="stride").view(path)
    assert view.step_size == h and selected_fine_blocks(view) == blocks
    idx = torch.randint(0, 64, (3, 8))
    with torch.no_grad():
        assert torch.allclose(view(idx)[0], euler_reference(model, blocks, h, idx), rtol=0, atol=1e-6)
        # unit steps are the paper's coarse model; the fine model is unchanged by the option
        unit = hierarchy(model, name, k, 0.25).view(path)
        assert unit.step_size == 1.0
        assert torch.allclose(unit(idx)[0], euler_reference(model, blocks, 1.0, idx), rtol=0, atol=1e-6)
        assert not torch.allclose(unit(idx)[0], view(idx)[0], atol=1e-3)  # the step size matters
        fine = hierarchy(model, name, k, 0.25, step_scale="stride").view(())
        assert fine.step_size == 1.0 and torch.equal(fine(idx)[0], model(idx)[0])


def test_step_scale_with_average_scales_its_own_blocks():
    model = make_model()
    h = hierarchy(model, "average", 3, 0.25, step_scale="stride")
    view = h.view((0,))
    h.restrict(view)
    assert view.step_size == 3.0 and view.n_blocks == 4
    idx = torch.randint(0, 64, (2, 8))
    x = model.wte(idx) + model.wpe(torch.arange(8))
    with torch.no_grad():
        for b in view.blocks:
            a = b.attn(b.ln_1(x))
            x = x + 3.0 * (a + b.mlp(b.ln_2(x + a)))
        assert torch.allclose(view(idx)[0], model.lm_head(model.ln_f(x)), rtol=0, atol=1e-6)


def selected_fine_blocks(view):
    """Indices in the fine model of a view's blocks (subset schemes)."""
    fine = view
    while fine.parent is not None:
        fine = fine.parent
    return [next(i for i, b in enumerate(fine.blocks) if b is blk) for blk in view.blocks]


def model(n_layer=4, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=64, n_layer=n_layer, n_embd=32, n_head=2, block_size=8))


def test_each_block_of_a_sub_path_takes_its_own_euler_step():
    m = model()
    x = torch.randint(0, 64, (3, 8))
    path = SubPath((0, 2, 3), (1.5, 0.5, 2.0))
    with torch.no_grad():
        h = m.wte(x) + m.wpe(torch.arange(8))
        for i, step in zip(path.blocks, path.scales):
            h = h + step * (m.blocks[i](h, 1.0) - h)  # x + h·F(x), F(x) = block(x) − x
        expected = m.lm_head(m.ln_f(h))
        torch.testing.assert_close(path_view(m, path)(x)[0], expected, atol=1e-5, rtol=1e-5)
        unit = path_view(m, SubPath((0, 2, 3), (1.0, 1.0, 1.0)))(x)[0]
        assert torch.equal(unit, path_view(m, SubPath((0, 2, 3)))(x)[0])  # steps of 1: the unscaled model, bitwise
        assert torch.equal(unit, m(x, blocks=[m.blocks[i] for i in (0, 2, 3)])[0])
