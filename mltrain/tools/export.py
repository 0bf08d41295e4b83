"""mltrain-export: a run's final weights as a Hugging Face GPT-2 folder (config.json + model.safetensors).

    mltrain-export RUN OUT
    >>> from transformers import GPT2LMHeadModel; GPT2LMHeadModel.from_pretrained(OUT)

The two models compute the same function; the differences are only in how parameters are stored:
- HF GPT-2's Conv1D holds its weight as (in, out), the transpose of nn.Linear's (out, in). c_attn is one
  q|k|v matrix in both, in the same order.
- GPT-2 always has LayerNorm weights and biases and Linear biases. A parameter-free norm exports as
  weight 1, bias 0; a model without biases exports zero biases. Affine norms and biases map as they are.
- mltrain's MLP uses exact GELU (F.gelu); HF's GPT-2 default is the tanh approximation (`gelu_new`), so
  the config says `activation_function: "gelu"`.
- The head is tied to the token embedding in both; the file stores `transformer.wte.weight` once.
RMSNorm has no GPT-2 counterpart: such a model is refused with one line, before anything is written.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
import torch.nn as nn
from safetensors.torch import save as save_safetensors

from mltrain.core.errors import ConfigError, MltrainError, StorageError, report, tool_main
from mltrain.model.gpt import GPT, Block, GPTConfig, Norm
from mltrain.model.settings import resolved_vocab
from mltrain.core import guarded
from mltrain.core.atomic import full_or_denied
from mltrain.core.guarded import write_bytes, write_json  # never through a link below the export's folder
from mltrain.runs.weights import check_vocabulary, config_from_info, load_weights, read_info, run_note

PROG = "mltrain-export"
HF_CONFIG = "config.json"
HF_WEIGHTS = "model.safetensors"
LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, which mltrain's make_norm uses


def unsupported(cfg: GPTConfig) -> Optional[str]:
    """Why GPT-2 cannot represent this model, or None when it can."""
    if cfg.norm != Norm.layernorm:
        return f"model.norm={cfg.norm}: GPT-2 has LayerNorm only, so this model has no GPT-2 equivalent"
    return None


def hf_config(cfg: GPTConfig, eot_token: Optional[int]) -> dict[str, Any]:
    """GPT-2's config.json for a model of this shape (what `transformers.GPT2Config` reads)."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.block_size,
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_inner": 4 * cfg.n_embd,
        "activation_function": "gelu",  # exact GELU, as mltrain's F.gelu (HF's default gelu_new is tanh)
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "attn_pdrop": cfg.dropout,
        "layer_norm_epsilon": LAYER_NORM_EPS,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "bos_token_id": eot_token,  # GPT-2 starts and ends documents with <|endoftext|>; bytes has none
        "eos_token_id": eot_token,
        "torch_dtype": "float32",
    }


def _norm(module: nn.Module, n_embd: int) -> tuple[torch.Tensor, torch.Tensor]:
    weight = getattr(module, "weight", None)
    weight = weight if weight is not None else torch.ones(n_embd)
    bias = getattr(module, "bias", None)
    return weight, bias if bias is not None else torch.zeros(n_embd)


def _conv1d(linear: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
    """nn.Linear (out, in) as HF Conv1D (in, out), with a zero bias when the Linear has none."""
    bias = linear.bias if linear.bias is not None else torch.zeros(linear.out_features)
    return linear.weight.t(), bias


def hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """HF GPT2LMHeadModel tensors for `model` (CPU, contiguous, the model's dtype)."""
    d = model.config.n_embd
    out: dict[str, torch.Tensor] = {
        "transformer.wte.weight": model.wte.weight[: resolved_vocab(model.config)],  # without model.pad_vocab_to's rows
        "transformer.wpe.weight": model.wpe.weight,
    }
    for i, block in enumerate(model.blocks):
        if not isinstance(block, Block):
            raise TypeError(f"model.blocks[{i}] is a {type(block).__name__}, not a Block: no GPT-2 layout to export")
        h = f"transformer.h.{i}"
        parts = {
            "ln_1": _norm(block.ln_1, d),
            "attn.c_attn": _conv1d(block.attn.c_attn),
            "attn.c_proj": _conv1d(block.attn.c_proj),
            "ln_2": _norm(block.ln_2, d),
            "mlp.c_fc": _conv1d(block.mlp.c_fc),
            "mlp.c_proj": _conv1d(block.mlp.c_proj),
        }
        for name, (weight, bias) in parts.items():
            out[f"{h}.{name}.weight"], out[f"{h}.{name}.bias"] = weight, bias
    out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = _norm(model.ln_f, d)
    dtype = model.wte.weight.dtype
    return {k: v.detach().to("cpu", dtype).contiguous() for k, v in out.items()}


def export(run_dir: str | Path, out: str | Path) -> Path:
    """Write RUN's final model to OUT as a HF GPT-2 folder; return OUT. Checks everything first."""
    run_dir, out = Path(run_dir), Path(out)
    info = read_info(run_dir)
    check_vocabulary(run_dir, info)  # the tokenizer's files are not needed (offline): its name, eot and bytes
    reason = unsupported(config_from_info(info))
    if reason is not None:
        raise ConfigError(f"cannot export {run_dir} to GPT-2: {reason}")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} exists and is not a folder")
    for name in (HF_CONFIG, HF_WEIGHTS):
        if (out / name).exists():
            raise ConfigError(f"{out / name} exists: {out} holds an earlier export; choose another folder "
                              "(nothing was changed)")
    status, note = run_note(run_dir)
    if note:  # an interrupted run's weights, or a run whose end is unknown: said, and recorded in config.json
        report(PROG, note + "; exporting them as they are", kind="warning")
    model, info = load_weights(run_dir, copies=3)  # the model, the exported tensors, the file's bytes
    tensors = hf_state_dict(model)
    config = {**hf_config(model.config, info.get("eot_token")), "mltrain_tokenizer": info["tokenizer"],
              "mltrain_run_status": status, **({"mltrain_run_note": note} if note else {})}
    # HF refuses safetensors files without format=pt in their metadata.
    _write_export(out, save_safetensors(tensors, metadata={"format": "pt"}), config)
    return out


def _write_export(out: Path, weights: bytes, config: dict[str, Any]) -> None:
    """Both files, the config last (its presence marks a complete export); on a failed write (read-only,
    full disk, file-size limit) StorageError, and nothing of the export is left behind."""
    made = [d for d in (out, *out.parents) if not d.exists()]
    guarded.refuse_linked([out / HF_WEIGHTS, out / HF_CONFIG], out)  # never through a link, checked before either
    try:
        write_bytes(out / HF_WEIGHTS, weights, root=out)
        write_json(out / HF_CONFIG, config, root=out, indent=2)
    except OSError as err:
        if isinstance(err, MltrainError) and not isinstance(err, StorageError):
            raise
        with contextlib.suppress(OSError):
            (out / HF_WEIGHTS).unlink()  # written, but without its config it is no export
        for folder in made:  # the folders this export created, innermost first (only if empty)
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(err, StorageError):
            raise StorageError(f"{err}; nothing was exported") from None
        where = err.filename or out
        raise StorageError(f"cannot write {where} ({full_or_denied(err)}); nothing was exported") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Write a run's final weights as a Hugging Face GPT-2 folder (config.json + model.safetensors), "
                    "loadable with transformers' GPT2LMHeadModel.from_pretrained(OUT).",
    )
    p.add_argument("run", help="run directory (holds model.safetensors and model.json)")
    p.add_argument("out", help="output folder (created; refused if it holds an earlier export)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    def act(args: argparse.Namespace) -> None:
        out = export(args.run, args.out)
        print(f"exported {args.run} -> {out} (HF GPT-2: {HF_CONFIG}, {HF_WEIGHTS})")

    return tool_main(PROG, _parser(), act, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
