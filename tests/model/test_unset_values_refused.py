"""What the type checker found unguarded is now refused in words: a vocabulary the tokenizer has not
filled yet, the fine model asked for the parent it does not have, a hierarchy asked to coarsen a view
with one Euler step per block."""

import pytest
import torch

from mltrain.model.memory import logit_bytes
from mltrain.method.coarsening import scheme_class
from mltrain.method.paths import SubPath
from mltrain.model.gpt import GPT, GPTConfig
from mltrain.model.settings import model_config, padded_vocab, resolved_vocab
from mltrain.model.views import Hierarchy, path_view

SHAPE = dict(n_layer=4, n_embd=32, n_head=2, block_size=8)


def test_an_unresolved_vocabulary_is_named_wherever_it_is_read():
    unset = GPTConfig(**SHAPE)
    for read in (resolved_vocab, padded_vocab, lambda c: logit_bytes(c, 2)):
        with pytest.raises(ValueError, match="vocab_size is unset"):
            read(unset)
    filled = model_config(unset, 50)
    assert resolved_vocab(filled) == 50
    assert padded_vocab(GPTConfig(**SHAPE, vocab_size=50, pad_vocab_to=64)) == 64


def _hierarchy() -> Hierarchy:
    torch.manual_seed(0)
    model = GPT(GPTConfig(**SHAPE, vocab_size=64))
    return Hierarchy(model, scheme_class("stride")(k=2, redraw=False, step_scale="unit"), 0.5)


def test_the_fine_model_has_no_parent_to_restrict_from_or_prolong_into():
    h = _hierarchy()
    for move in (h.restrict, h.prolong):
        with pytest.raises(ValueError, match="fine model: it has no parent"):
            move(h.fine)
    coarse = h.view((0,))
    h.restrict(coarse)  # a coarse view has one
    h.prolong(coarse)


def test_a_hierarchy_coarsens_only_views_with_one_euler_step():
    h = _hierarchy()
    per_block = path_view(h.model, SubPath((0, 2), (2.0, 2.0)))
    assert per_block.step_size == (2.0, 2.0)
    h._views.clear()
    h.fine = per_block  # a view whose blocks each take their own step cannot be coarsened
    with pytest.raises(ValueError, match="a step per block"):
        h.view((0,))
