"""Weights out: model.safetensors + model.json at the end of a run, mltrain-sample, mltrain-export."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mltrain.tools.export import HF_CONFIG, HF_WEIGHTS, hf_state_dict
from mltrain.tools.export import main as export_main
from mltrain.model import GPT, GPTConfig, Norm
from mltrain.run import run
from mltrain.tools.sample import generate
from mltrain.tools.sample import main as sample_main
from mltrain.errors import DataError
from mltrain.runs.weights import INFO_FILE, WEIGHTS_FILE, load_weights, save_weights


SMALL = dict(vocab_size=256, n_layer=2, n_head=2, n_embd=32, block_size=16)
# Every LayerNorm/bias combination GPT-2 can represent, and RMSNorm, which it cannot.
VARIANTS = {
    "paper": dict(),  # no biases, parameter-free LayerNorm (gpt22m's shape)
    "bias_affine": dict(bias=True, norm_affine=True),
    "affine_no_bias": dict(norm_affine=True),
    "bias_plain_norm": dict(bias=True),
}
# fp32 on both sides, the same operations except the matmul layout (Conv1D's addmm on the transposed
# weight vs Linear) and, with HF's eager attention, the attention kernel: the differences are float32
# rounding, measured 0 (sdpa) and <1e-6 (eager) on these models, 1.3e-5 (eager) at gpt22m's shape.
LOGITS_ATOL = 1e-4


def random_model(seed: int = 0, **overrides) -> GPT:
    """A GPT whose every parameter (norm weights and biases included) is random, so a wrong mapping shows."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**{**SMALL, **overrides}))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def saved_run(tmp_path: Path, name: str = "run", tokenizer: str = "bytes", **overrides) -> tuple[Path, GPT]:
    model = random_model(**overrides)
    run_dir = tmp_path / name
    save_weights(run_dir, model, tokenizer)
    return run_dir, model


def error_line(capsys, prog: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


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


@pytest.mark.slow
def test_every_finished_run_writes_its_weights_and_they_reproduce_its_val_loss(tmp_path, make_config):
    cfg = make_config("scale=smoke", "coarsening=evenodd", "train.progress=false", tiny=False)
    run_dir = tmp_path / "run"
    run(cfg, run_dir=run_dir)
    info = json.loads((run_dir / INFO_FILE).read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert info["tokenizer"] == "bytes" and info["eot_token"] is None
    assert info["model"]["n_layer"] == 2 and info["model"]["n_embd"] == 32 and info["model"]["vocab_size"] == 256
    assert info["n_params"] == summary["n_params"]
    model, _ = load_weights(run_dir)
    torch.manual_seed(cfg.seed)
    assert not torch.equal(model.wpe.weight, GPT(model.config).wpe.weight)  # trained, not the initial weights

    # The saved model is the one that was evaluated last: the same held-out batches give the same loss.
    from mltrain.data import BatchSampler, load_tokens
    from mltrain.training.evaluation import EVAL_SEED

    data = load_tokens(cfg.data)
    val = BatchSampler(data.val, cfg.train.batch_size, cfg.model.block_size, seed=EVAL_SEED, split="val")
    with torch.no_grad():
        losses = [model(*val.batch(i))[1].item() for i in range(cfg.train.eval_batches)]
    assert sum(losses) / len(losses) == pytest.approx(summary["final_val_loss"], rel=1e-5)


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


# ---------------------------------------------------------------------------------------------
# mltrain-sample


def test_generate_crops_to_the_context_and_greedy_is_top_k_1(tmp_path):
    model = random_model()
    prompt = [104, 105]
    greedy = generate(model, prompt, 40, temperature=0)  # 42 tokens > block_size 16: cropped context
    assert len(greedy) == 40
    g = torch.Generator().manual_seed(123)
    assert generate(model, prompt, 40, temperature=1.0, top_k=1, generator=g) == greedy
    # greedy, token by token, from the last block_size tokens
    ids = list(prompt)
    for _ in range(40):
        ids.append(int(model(torch.tensor([ids[-16:]]))[0][0, -1].argmax()))
    assert ids[2:] == greedy


def test_generate_never_samples_padded_vocabulary_rows():
    model = random_model(vocab_size=300)
    with torch.no_grad():
        model.wte.weight[256:] *= 100  # make the padding rows the likeliest
    g = torch.Generator().manual_seed(0)
    out = generate(model, [10], 50, temperature=2.0, generator=g, vocab_limit=256)
    assert max(out) < 256
    assert max(generate(model, [10], 5, temperature=0)) >= 256  # without the limit they would be chosen


def test_sampling_is_deterministic_with_a_seed(tmp_path, capsys):
    run_dir, _ = saved_run(tmp_path)

    def sample(*args: str) -> str:
        assert sample_main([str(run_dir), "--prompt", "The ", "--max-new-tokens", "30", *args]) == 0
        return capsys.readouterr().out

    a, b, c = sample("--seed", "1"), sample("--seed", "1"), sample("--seed", "2")
    assert a == b and a != c and a.startswith("The ")
    assert sample("--temperature", "0", "--seed", "1") == sample("--temperature", "0", "--seed", "2")
    two = sample("--seed", "1", "--num-samples", "2", "--top-k", "5")
    assert two.count("\n---\n") == 1


def test_sample_bad_input_is_one_error_line_exit_2(tmp_path, capsys, monkeypatch):
    assert sample_main([str(tmp_path / "nope"), "--prompt", "x"]) == 2
    assert "no such run directory" in error_line(capsys, "mltrain-sample")
    assert sample_main([str(tmp_path), "--prompt", "x"]) == 2
    assert "has no model.safetensors" in error_line(capsys, "mltrain-sample")
    run_dir, _ = saved_run(tmp_path)
    assert sample_main([str(run_dir), "--temperature", "-1"]) == 2
    assert "--temperature" in error_line(capsys, "mltrain-sample")

    # a run trained with a tiktoken encoding whose files are not here, offline
    info = json.loads((run_dir / INFO_FILE).read_text())
    (run_dir / INFO_FILE).write_text(json.dumps({**info, "tokenizer": "r50k_base"}))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty_cache"))
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):  # refused at once, never hangs
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    assert sample_main([str(run_dir), "--prompt", "x"]) == 2
    line = error_line(capsys, "mltrain-sample")
    assert "r50k_base" in line and "TIKTOKEN_CACHE_DIR" in line and "=bytes" not in line
    (run_dir / INFO_FILE).write_text(json.dumps({**info, "tokenizer": "no_such_encoding"}))
    assert sample_main([str(run_dir), "--prompt", "x"]) == 2
    assert "not a known tokenizer" in error_line(capsys, "mltrain-sample")


def test_sample_uses_the_runs_gpt2_tokenizer(tmp_path, capsys, gpt2_cache):
    run_dir, _ = saved_run(tmp_path, tokenizer="gpt2", vocab_size=50257)
    assert json.loads((run_dir / INFO_FILE).read_text())["eot_token"] == 50256
    assert sample_main([str(run_dir), "--prompt", "Hello world", "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("Hello world")


@pytest.mark.slow
def test_console_scripts_exit_2_with_one_line(tmp_path):
    for prog, args in (("mltrain-sample", [str(tmp_path / "nope")]),
                       ("mltrain-export", [str(tmp_path / "nope"), "out"])):
        entry = prog.replace("mltrain-", "") + "_main"
        code = f"import sys; from mltrain.console import {entry}; sys.argv = [{prog!r}, *{args!r}]; {entry}()"
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [f"{prog}: error: {tmp_path / 'nope'}: no such run directory"]


# ---------------------------------------------------------------------------------------------
# mltrain-export


def max_logits_diff(run_dir: Path, out: Path, model: GPT, attn_implementation: str) -> float:
    transformers = pytest.importorskip("transformers")
    hf, loading = transformers.GPT2LMHeadModel.from_pretrained(
        out, output_loading_info=True, attn_implementation=attn_implementation)
    assert not loading["missing_keys"] and not loading["unexpected_keys"] and not loading["mismatched_keys"]
    hf.eval()
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()  # tied there too
    torch.manual_seed(1)
    idx = torch.randint(0, model.config.vocab_size, (3, model.config.block_size))
    with torch.no_grad():
        ours = model(idx)[0]
        theirs = hf(idx).logits
    assert theirs.dtype == torch.float32 and theirs.shape == ours.shape
    return (ours - theirs).abs().max().item()


@pytest.mark.parametrize("variant", VARIANTS)
def test_export_loads_in_transformers_with_the_same_logits(tmp_path, variant, capsys):
    run_dir, model = saved_run(tmp_path, **VARIANTS[variant])
    out = tmp_path / "hf"
    assert export_main([str(run_dir), str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [HF_CONFIG, HF_WEIGHTS]
    for attn in ("eager", "sdpa"):
        diff = max_logits_diff(run_dir, out, model, attn)
        assert diff < LOGITS_ATOL, (attn, diff)
    config = json.loads((out / HF_CONFIG).read_text())
    assert config["activation_function"] == "gelu" and config["n_positions"] == 16
    assert config["mltrain_tokenizer"] == "bytes" and config["eos_token_id"] is None


def test_exact_gelu_matters_the_tanh_default_would_not_match(tmp_path):
    """The test above can fail: with HF's default activation the same weights give other logits."""
    run_dir, model = saved_run(tmp_path)
    out = tmp_path / "hf"
    assert export_main([str(run_dir), str(out)]) == 0
    config = json.loads((out / HF_CONFIG).read_text())
    (out / HF_CONFIG).write_text(json.dumps({**config, "activation_function": "gelu_new"}))
    assert max_logits_diff(run_dir, out, model, "eager") > LOGITS_ATOL  # 7e-4 here; the right export: ~1e-6


def test_export_state_dict_layout():
    model = random_model()
    sd = hf_state_dict(model)
    assert torch.equal(sd["transformer.h.0.attn.c_attn.weight"], model.blocks[0].attn.c_attn.weight.t())
    assert sd["transformer.h.1.mlp.c_fc.weight"].shape == (32, 128)
    assert torch.equal(sd["transformer.ln_f.weight"], torch.ones(32))  # parameter-free norm
    assert torch.equal(sd["transformer.h.0.mlp.c_proj.bias"], torch.zeros(32))  # no biases
    assert "lm_head.weight" not in sd


def test_export_refuses_what_gpt2_cannot_represent_and_existing_output(tmp_path, capsys):
    run_dir, _ = saved_run(tmp_path, name="rms", norm=Norm.rmsnorm)
    out = tmp_path / "hf"
    assert export_main([str(run_dir), str(out)]) == 2
    assert "model.norm=rmsnorm" in error_line(capsys, "mltrain-export") and not out.exists()

    run_dir, _ = saved_run(tmp_path, name="ok")
    out.mkdir()
    (out / HF_CONFIG).write_text("{}")
    assert export_main([str(run_dir), str(out)]) == 2
    assert "holds an earlier export" in error_line(capsys, "mltrain-export")
    assert (out / HF_CONFIG).read_text() == "{}" and not (out / HF_WEIGHTS).exists()

    assert export_main([str(tmp_path / "nope"), str(tmp_path / "hf2")]) == 2
    assert "no such run directory" in error_line(capsys, "mltrain-export") and not (tmp_path / "hf2").exists()
