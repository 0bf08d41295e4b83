"""mltrain-sample and mltrain-export: generating from a run's weights and exporting them, bad input as
one line, and the edges (a reader that goes, Ctrl-C, temperature and prompt, a place export cannot write)."""

from __future__ import annotations

import errno
import json
import re
import sys
from pathlib import Path

import pytest
import torch
from helpers import VARIANTS, random_model, saved_run

from mltrain.core.errors import StorageError
from mltrain.model.gpt import GPT, Norm
from mltrain.runs.weights import INFO_FILE
from mltrain.runs.weights import load_weights
from mltrain.tools.export import HF_CONFIG, HF_WEIGHTS, hf_state_dict
from mltrain.tools.export import main as export_main
from mltrain.tools.sample import generate
from mltrain.tools.sample import main as sample_main


# fp32 on both sides, the same operations except the matmul layout (Conv1D's addmm on the transposed
# weight vs Linear) and, with HF's eager attention, the attention kernel: the differences are float32
# rounding, measured 0 (sdpa) and <1e-6 (eager) on these models, 1.3e-5 (eager) at gpt22m's shape.
LOGITS_ATOL = 1e-4


def error_line(capsys, prog: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


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


def test_sampling_streams_and_holds_only_one_context(weights_dir):
    from itertools import islice

    from mltrain.tools.sample import stream

    model, _ = load_weights(weights_dir)
    tokens = list(islice(stream(model, [104], 10**15, temperature=1.0, generator=torch.Generator().manual_seed(0)), 300))
    assert len(tokens) == 300  # a generator: 10**15 asked, 300 made


# ---------------------------------------------------------------------------------------------
# The tools' edges (mltrain-sample, mltrain-export)


class _Reader:
    """A stdout whose reader goes away (`error`: BrokenPipeError) or a user who presses Ctrl-C
    (KeyboardInterrupt) after `after` writes."""

    def __init__(self, error: type, after: int):
        self.error, self.after, self.text = error, after, ""

    def write(self, text: str) -> int:
        self.after -= 1
        if self.after == 0:
            raise self.error
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("error,code,said", [(BrokenPipeError, 141, ""), (KeyboardInterrupt, 130, "interrupted")])
def test_sample_stops_quietly_when_its_reader_goes_and_in_one_line_on_ctrl_c(weights_dir, monkeypatch, capsys, error,
                                                                               code, said):
    from mltrain.tools.sample import main

    out = _Reader(error, after=20)
    monkeypatch.setattr(sys, "stdout", out)
    assert main([str(weights_dir), "--max-new-tokens", "1000000000000"]) == code
    err = capsys.readouterr().err
    assert len(out.text) > 0 and "Traceback" not in err
    assert err.strip().splitlines() == ([] if not said else [f"mltrain-sample: {said}: stopped by Ctrl-C; the text "
                                                            f"above is what was generated"])


def test_sample_edges_temperature_and_prompt(weights_dir, capsys):
    from mltrain.tools.sample import generate, main

    model, _ = load_weights(weights_dir)
    tiny = generate(model, [104, 105], 30, temperature=1e-45, generator=torch.Generator().manual_seed(0))
    assert tiny == generate(model, [104, 105], 30, temperature=0)  # all the probability on the likeliest
    for args, named in ((["--temperature", "inf"], "--temperature inf"), (["--prompt", "caf\udce9"], "not valid UTF-8")):
        assert main([str(weights_dir), *args]) == 2
        line = capsys.readouterr().err.strip()
        assert line.startswith("mltrain-sample: error: ") and named in line and "\n" not in line


def test_export_into_a_place_it_cannot_write_is_one_line_and_leaves_nothing(weights_dir, tmp_path, monkeypatch):
    from mltrain.tools import export

    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(StorageError, match=rf"cannot write {re.escape(str(blocker))}/out.*nothing was exported"):
        export.export(weights_dir, blocker / "out")

    def full(path, *args, **kwargs):
        raise OSError(errno.EFBIG, "File too large", str(path))

    monkeypatch.setattr(export, "write_json", full)  # the weights fit, the config does not
    with pytest.raises(StorageError, match="File too large: the disk, the quota or the file-size limit is full"):
        export.export(weights_dir, tmp_path / "new" / "out")
    assert not (tmp_path / "new").exists()
