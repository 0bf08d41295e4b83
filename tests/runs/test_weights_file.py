"""The final weights: a round trip is bit-exact and keeps the tied head, equal weights give
byte-identical files, model.json is checked before anything is allocated; bad run dirs, and a run that
diverged, are one line."""

from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors.torch import load_file
from helpers import compose_config, VARIANTS, saved_run, typed

from mltrain.core.errors import DataError
from mltrain.model.gpt import Norm
from mltrain.runs.weights import INFO_FILE, WEIGHTS_FILE, load_weights
from mltrain.runs.weights import canonical_safetensors, save_weights


# ---------------------------------------------------------------------------------------------
# model.safetensors + model.json


@pytest.mark.parametrize("variant", [*VARIANTS, "rmsnorm"])
def test_round_trip_is_bit_exact_and_keeps_the_tie(tmp_path, variant):
    overrides = VARIANTS.get(variant, dict(norm=Norm.rmsnorm, norm_affine=True))
    run_dir, model = saved_run(tmp_path, **overrides)
    stored = load_file(run_dir / WEIGHTS_FILE)
    assert "lm_head.weight" not in stored and "wte.weight" in stored  # the tied head is stored once

    loaded, info = load_weights(run_dir)
    assert loaded.config == model.config and info["tokenizer"] == "bytes" and info["n_params"] == model.num_params()
    assert loaded.lm_head.weight is loaded.wte.weight
    original, back = model.state_dict(), loaded.state_dict()
    assert original.keys() == back.keys()
    for name in original:
        assert torch.equal(original[name], back[name]), name
    idx = torch.randint(0, 256, (2, 16))
    assert torch.equal(model(idx)[0], loaded(idx)[0])


def test_loading_bad_run_dirs_fails_with_one_line(tmp_path):
    with pytest.raises(DataError, match="no such run directory"):
        load_weights(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="has no model.safetensors"):
        load_weights(tmp_path / "empty")
    run_dir, _ = saved_run(tmp_path)
    info = json.loads((run_dir / INFO_FILE).read_text())
    assert info["model"]["norm"] == "layernorm"  # plain JSON, not an Enum's repr
    (run_dir / INFO_FILE).write_text(json.dumps({**info, "model": {**info["model"], "norm": "batchnorm"}}))
    with pytest.raises(DataError, match="batchnorm"):  # never silently another model
        load_weights(run_dir)
    info["model"]["n_embd"] = 64
    (run_dir / INFO_FILE).write_text(json.dumps(info))
    with pytest.raises(DataError) as e:
        load_weights(run_dir)
    assert "does not match the model" in str(e.value) and "\n" not in str(e.value)
    (run_dir / WEIGHTS_FILE).write_bytes(b"not safetensors")
    with pytest.raises(DataError, match="not a readable safetensors file"):
        load_weights(run_dir)


def test_a_run_that_diverges_leaves_no_earlier_weights_and_the_tools_say_why(tmp_path, capsys):
    from mltrain.model.gpt import GPT, GPTConfig
    from mltrain.run import RunDiverged, run
    from mltrain.tools.sample import main as sample_main

    run_dir = tmp_path / "run"
    save_weights(run_dir, GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256)), "bytes")
    with pytest.raises(RunDiverged):
        run(typed(compose_config("optim.lr=1e30", "train.grad_clip=0", "train.max_steps=6")), run_dir=run_dir)
    assert not (run_dir / WEIGHTS_FILE).exists() and not (run_dir / INFO_FILE).exists()
    assert sample_main([str(run_dir)]) == 2
    assert "holds a run that diverged" in capsys.readouterr().err
    save_weights(run_dir, GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256)), "bytes")
    with pytest.raises(DataError, match="is from before the run diverged"):  # a run dir of an older mltrain
        load_weights(run_dir)


def test_equal_weights_give_byte_identical_files(tmp_path):
    from safetensors.torch import save

    tensors = {"b": torch.ones(3), "a": torch.zeros(2)}
    metadata = {"format": "pt", "producer": "mltrain-gpt", "tokenizer": "bytes", "z": "1", "m": "2"}
    orders = [list(metadata.items()), list(reversed(metadata.items()))]
    blobs = {canonical_safetensors(save(tensors, metadata=dict(items))) for items in orders for _ in range(4)}
    assert len(blobs) == 1
    blob = blobs.pop()
    header = json.loads(blob[8:8 + int.from_bytes(blob[:8], "little")])
    assert list(header["__metadata__"]) == sorted(metadata)
    from safetensors.torch import load

    assert all(torch.equal(load(blob)[k], v) for k, v in tensors.items())


@pytest.mark.parametrize("field,value,named", [
    ("n_embd", 10**6, "of weights"), ("n_layer", 10**9, "of weights"), ("vocab_size", 2**39, "of weights"),
    ("n_head", 3, "not divisible"), ("block_size", -4, "model.block_size is -4"), ("n_layer", "2", "model.n_layer is '2'"),
    ("dropout", 1.5, "model.dropout"), ("bias", "yes", "model.bias"), ("n_embd", True, "model.n_embd is True"),
])
def test_model_json_is_checked_before_anything_is_allocated(weights_dir, field, value, named):
    info = json.loads((weights_dir / INFO_FILE).read_text())
    info["model"][field] = value
    (weights_dir / INFO_FILE).write_text(json.dumps(info))
    with pytest.raises(DataError, match=re.escape(named)):
        load_weights(weights_dir)
