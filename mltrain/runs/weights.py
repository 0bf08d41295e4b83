"""A run's final weights on disk: `model.safetensors` plus `model.json` (the model's shape, the tokenizer).

    save_weights(run_dir, model, tokenizer="bytes")   # at the end of every run
    model, info = load_weights(run_dir)                # mltrain-sample, mltrain-export, your own scripts

The head is tied to the token embedding (one matrix, `lm_head.weight is wte.weight`), so the file stores it
once, as `wte.weight`; loading ties it again. Tensors are stored as the model holds them (fp32: bf16 is
only an autocast dtype during training), so a save/load round trip is bit-exact. Both files are written
atomically; a reader needs both, and `model.json` is written last, so its presence means a complete pair.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from enum import Enum
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from mltrain.runs.atomic import write_bytes, write_json
from mltrain.data import get_tokenizer
from mltrain.errors import DataError
from mltrain.model import GPT, GPTConfig

WEIGHTS_FILE = "model.safetensors"
INFO_FILE = "model.json"
FORMAT = "mltrain-gpt"
TIED = {"lm_head.weight": "wte.weight"}  # stored once, under the name on the right


def model_info(model: GPT, tokenizer: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "model": {k: v.value if isinstance(v, Enum) else v for k, v in dataclasses.asdict(model.config).items()},
        "tokenizer": tokenizer,
        # The run has loaded its tokenizer already (tiktoken caches it), so this costs nothing here and
        # spares readers (mltrain-export) a tokenizer they may not have offline.
        "eot_token": get_tokenizer(tokenizer).eot_token,
        "n_params": model.num_params(),
        "tied": TIED,
    }


def save_weights(run_dir: str | Path, model: GPT, tokenizer: str) -> Path:
    """Write `model.safetensors` and `model.json` into `run_dir`; return the weights' path."""
    run_dir = Path(run_dir)
    tensors = {
        name: t.detach().to("cpu").contiguous()
        for name, t in model.state_dict().items()
        if name not in TIED
    }
    blob = save_safetensors(tensors, metadata={"format": "pt", "producer": FORMAT, "tokenizer": tokenizer})
    write_bytes(run_dir / WEIGHTS_FILE, blob)
    write_json(run_dir / INFO_FILE, model_info(model, tokenizer))
    return run_dir / WEIGHTS_FILE


def read_info(run_dir: str | Path) -> dict[str, Any]:
    """`model.json` of a run dir, checked; DataError naming the path when it is missing or unusable."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DataError(f"{run_dir}: no such run directory")
    path = run_dir / INFO_FILE
    if not path.is_file() or not (run_dir / WEIGHTS_FILE).is_file():
        raise DataError(
            f"{run_dir} has no {WEIGHTS_FILE} and {INFO_FILE} (they are written when a run ends; "
            "is this a run dir, and did the run finish?)"
        )
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: cannot read it as JSON ({err})") from err
    if not isinstance(info, dict) or info.get("format") != FORMAT or not isinstance(info.get("model"), dict):
        raise DataError(f"{path} is not an mltrain model description (format {FORMAT!r})")
    return info


def model_config(info: dict[str, Any]) -> GPTConfig:
    """The GPTConfig described by `info["model"]`; fixed-choice fields (norm, attention) as their Enums, so
    a value this mltrain does not know fails here instead of silently building another model."""
    types = typing.get_type_hints(GPTConfig)
    fields = {f.name for f in dataclasses.fields(GPTConfig)}
    unknown = sorted(set(info["model"]) - fields)
    if unknown:
        raise DataError(f"{INFO_FILE} has model fields this mltrain does not know: {', '.join(unknown)}")
    values = dict(info["model"])
    if not isinstance(values.get("vocab_size"), int):
        raise DataError(f"{INFO_FILE}: model.vocab_size is {values.get('vocab_size')!r}, not a number of tokens")
    try:
        for name, value in values.items():
            if isinstance(types[name], type) and issubclass(types[name], Enum):
                values[name] = types[name](value)
        return GPTConfig(**values)
    except (TypeError, ValueError) as err:
        raise DataError(f"{INFO_FILE}: {err}") from err


def load_weights(run_dir: str | Path, device: str | torch.device = "cpu") -> tuple[GPT, dict[str, Any]]:
    """The run's final model (eval mode, on `device`) and its `model.json` contents."""
    run_dir = Path(run_dir)
    info = read_info(run_dir)
    model = GPT(model_config(info))
    try:
        tensors = load_safetensors((run_dir / WEIGHTS_FILE).read_bytes())
    except (OSError, SafetensorError) as err:
        raise DataError(f"{run_dir / WEIGHTS_FILE}: not a readable safetensors file ({err})") from err
    try:
        missing, unexpected = model.load_state_dict(tensors, strict=False)
    except RuntimeError as err:  # a tensor of another shape; torch's message spans lines
        detail = " ".join(str(err).split())
        raise DataError(f"{run_dir / WEIGHTS_FILE} does not match the model in {INFO_FILE}: {detail}") from err
    missing = sorted(set(missing) - set(TIED))  # the tied head is the embedding, loaded under its name
    if missing or unexpected:
        raise DataError(
            f"{run_dir / WEIGHTS_FILE} does not match the model in {INFO_FILE}: "
            f"missing {missing or 'nothing'}, unexpected {sorted(unexpected) or 'nothing'}"
        )
    # load_state_dict copies into the existing parameters, so the tie (one Parameter) is intact.
    assert model.lm_head.weight is model.wte.weight
    return model.to(device).eval(), info
