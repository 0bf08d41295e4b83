"""Every finished run writes its weights and they reproduce its held-out loss; the tools' console scripts
exit 2 with one line."""

import json

import pytest
import torch

from helpers import run_tool_here, typed
from mltrain.model.gpt import GPT
from mltrain.run import run
from mltrain.runs.weights import INFO_FILE, load_weights


def test_every_finished_run_writes_its_weights_and_they_reproduce_its_val_loss(tmp_path, make_config):
    cfg = make_config("scale=smoke", "coarsening=evenodd", "train.progress=false", tiny=False)
    run_dir = tmp_path / "run"
    run(typed(cfg), run_dir=run_dir)
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
    from mltrain.training.settings import held_out_sequences

    data = load_tokens(cfg.data)
    val = BatchSampler(data.val, 1, cfg.model.block_size, seed=0, split="val")
    x, y = val.spread(held_out_sequences(cfg.train, cfg.model.block_size)).unbind(0)
    with torch.no_grad():
        loss = model(x, y)[1].item()  # the mean over every held-out token: equal-length sequences
    assert loss == pytest.approx(summary["final_val_loss"], rel=1e-5)


def test_console_scripts_exit_2_with_one_line(tmp_path):
    for prog, args in (("mltrain-sample", [str(tmp_path / "nope")]),
                       ("mltrain-export", [str(tmp_path / "nope"), "out"])):
        proc = run_tool_here(prog, *args, cwd=tmp_path)  # mltrain.console's entry point, in this process
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [f"{prog}: error: {tmp_path / 'nope'}: no such run directory"]
