"""A run's final weights on disk: `model.safetensors` plus `model.json` (the model's shape, the tokenizer).

    save_weights(run_dir, model, tokenizer="bytes")   # at the end of every run
    model, info = load_weights(run_dir)                # mltrain-sample, mltrain-export, your own scripts

The head is tied to the token embedding (one matrix, `lm_head.weight is wte.weight`), so the file stores it
once, as `wte.weight`; loading ties it again. Tensors are stored as the model holds them (fp32: bf16 is
only an autocast dtype during training), so a save/load round trip is bit-exact, and equal weights give
equal files, byte for byte (the header's metadata is written in sorted order). Both files are written
atomically; a reader needs both, and `model.json` is written last, so its presence means a complete pair.

A reader trusts nothing in `model.json`: every field is checked (types, ranges, n_embd divisible by
n_head) and the model's size against the memory there is, before anything is allocated. A run that
diverged has no final weights (a resumed run that diverges removes those of its earlier stage), and a
run dir whose summary.json says it diverged is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import typing
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from mltrain.core.atomic import write_bytes, write_json
from mltrain.data import get_tokenizer
from mltrain.core.errors import DataError, first_line
from mltrain.model.gpt import GPT, GPTConfig, padded_vocab
from mltrain.model.settings import resolved_vocab

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
    write_bytes(run_dir / WEIGHTS_FILE, canonical_safetensors(blob))
    write_json(run_dir / INFO_FILE, model_info(model, tokenizer))
    return run_dir / WEIGHTS_FILE


def canonical_safetensors(blob: bytes) -> bytes:
    """`blob` (safetensors' bytes) with the header's metadata in sorted key order: the library writes it
    from a hash map, whose order changes from process to process, so equal tensors gave unequal files.
    The header keeps its length (the same JSON, reordered), so the tensor data does not move."""
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8 : 8 + n])
    if isinstance(header.get("__metadata__"), dict):
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    if len(text) > n:  # pragma: no cover - the same content cannot grow
        return blob
    return blob[:8] + text.ljust(n, b" ") + blob[8 + n :]


def remove_weights(run_dir: str | Path) -> None:
    """Delete the run dir's final weights (model.json first: a reader needs both): a run that diverged
    after a resume must not leave those of its earlier stage, which would pass for its final model."""
    for name in (INFO_FILE, WEIGHTS_FILE):
        with contextlib.suppress(FileNotFoundError):
            (Path(run_dir) / name).unlink()


def read_info(run_dir: str | Path) -> dict[str, Any]:
    """`model.json` of a run dir, checked; DataError naming the path when it is missing or unusable."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DataError(f"{run_dir}: no such run directory")
    _refuse_diverged(run_dir)
    path = run_dir / INFO_FILE
    if not path.is_file() or not (run_dir / WEIGHTS_FILE).is_file():
        raise DataError(
            f"{run_dir} has no {WEIGHTS_FILE} and {INFO_FILE} (they are written when a run ends; "
            "is this a run dir, and did the run finish?)"
        )
    try:
        info = json.loads(path.read_bytes())
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: cannot read it as JSON ({err})") from err
    if not isinstance(info, dict) or info.get("format") != FORMAT or not isinstance(info.get("model"), dict):
        raise DataError(f"{path} is not an mltrain model description (format {FORMAT!r})")
    return info


def _refuse_diverged(run_dir: Path) -> None:
    """DataError when summary.json says the run diverged: its weights (if any) are of an earlier stage."""
    try:
        summary = json.loads((run_dir / "summary.json").read_bytes())
    except (OSError, ValueError):
        return  # no summary (a run still going, or weights saved by a script): the weights speak for themselves
    if isinstance(summary, dict) and summary.get("status") == "diverged":
        stale = (f", and its {WEIGHTS_FILE} is from before the run diverged"
                 if (run_dir / WEIGHTS_FILE).exists() else "")
        raise DataError(f"{run_dir} holds a run that diverged (summary.json): it has no final weights{stale}; "
                        f"use a checkpoint in {run_dir / 'checkpoints'} or another run")


_POSITIVE = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")
_FLAGS = ("bias", "norm_affine")


def _check_fields(values: dict[str, Any]) -> None:
    """DataError naming the first field of `model.json` that no model can have (before anything is built)."""
    for name in _POSITIVE:
        v = values.get(name)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 2**40:
            raise DataError(f"{INFO_FILE}: model.{name} is {v!r}, not a whole number in [1, 2**40)")
    for name in _FLAGS:
        if name in values and not isinstance(values[name], bool):
            raise DataError(f"{INFO_FILE}: model.{name} is {values[name]!r}, not true or false")
    dropout = values.get("dropout", 0.0)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise DataError(f"{INFO_FILE}: model.dropout is {dropout!r}, not a number in [0, 1)")
    if values["n_embd"] % values["n_head"]:
        raise DataError(f"{INFO_FILE}: model.n_embd={values['n_embd']} is not divisible by "
                        f"model.n_head={values['n_head']}")


def weight_bytes(cfg: GPTConfig) -> int:
    """fp32 bytes of the model's parameters (tied head counted once), from its shape alone."""
    d = cfg.n_embd
    norms = (2 if cfg.bias else 1) * d if cfg.norm_affine else 0  # per norm: weight (and bias)
    per_block = 12 * d * d + (9 * d if cfg.bias else 0) + 2 * norms
    return 4 * (resolved_vocab(cfg) * d + cfg.block_size * d + cfg.n_layer * per_block + norms)


def check_room(cfg: GPTConfig, copies: float, device: Any, what: str) -> None:
    """DataError when `copies` times the model's weights cannot fit in the memory free on `device`."""
    from mltrain.model.memory import available_bytes

    need = int(weight_bytes(cfg) * copies)
    free: Optional[int] = available_bytes(torch.device(device))
    if free is not None and need > free:
        raise DataError(
            f"{INFO_FILE} describes a model of {weight_bytes(cfg) / 1e9:,.1f} GB of weights ({cfg.n_layer} blocks, "
            f"d={cfg.n_embd}, vocab {cfg.vocab_size}): {what} needs at least {need / 1e9:,.1f} GB, more than the "
            f"{free / 1e9:,.1f} GB available; is {INFO_FILE} the one the run wrote?"
        )


def config_from_info(info: dict[str, Any]) -> GPTConfig:
    """The GPTConfig described by `info["model"]`; fixed-choice fields (norm, attention) as their Enums, so
    a value this mltrain does not know fails here instead of silently building another model."""
    types = typing.get_type_hints(GPTConfig)
    fields = {f.name for f in dataclasses.fields(GPTConfig)}
    unknown = sorted(set(info["model"]) - fields)
    if unknown:
        raise DataError(f"{INFO_FILE} has model fields this mltrain does not know: {', '.join(unknown)}")
    values = dict(info["model"])
    _check_fields(values)
    try:
        for name, value in values.items():
            if isinstance(types[name], type) and issubclass(types[name], Enum):
                values[name] = types[name](value)
        return GPTConfig(**values)
    except (TypeError, ValueError) as err:
        raise DataError(f"{INFO_FILE}: {err}") from err


MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit on the JSON header


def read_header(path: Path) -> dict[str, list[int]]:
    """The tensor names and shapes a safetensors file's header lists (its first 8 bytes give the header's
    length, the JSON that follows names every tensor); DataError naming the file when it cannot be read."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            n = int.from_bytes(f.read(8), "little")
            if not 0 < n <= min(size - 8, MAX_HEADER_BYTES):
                raise ValueError(f"its header length {n:,} does not fit a {size:,}-byte file")
            header = json.loads(f.read(n))
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")
        return {k: list(v.get("shape", [])) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: not a readable safetensors file ({err})") from None


def check_header(run_dir: Path, cfg: GPTConfig) -> None:
    """DataError when model.json describes another model than the weights file holds (the number of
    blocks, the embedding's and positions' shapes): compared before anything is built, so a model.json
    edited to say 100,000 blocks costs no 100,000-block model."""
    shapes = read_header(run_dir / WEIGHTS_FILE)
    blocks = {int(k.split(".")[1]) for k in shapes if k.startswith("blocks.") and k.split(".")[1].isdigit()}
    expected = {"blocks": cfg.n_layer, "wte.weight": [padded_vocab(cfg), cfg.n_embd],
                "wpe.weight": [cfg.block_size, cfg.n_embd]}
    found = {"blocks": len(blocks) if blocks == set(range(len(blocks))) else sorted(blocks)[:5],
             "wte.weight": shapes.get("wte.weight"), "wpe.weight": shapes.get("wpe.weight")}
    differ = [k for k in expected if expected[k] != found[k]]
    if differ:
        said = "; ".join(f"{k}: {expected[k]} in {INFO_FILE}, {found[k]} in {WEIGHTS_FILE}" for k in differ)
        raise DataError(f"{run_dir / WEIGHTS_FILE} does not match the model in {INFO_FILE} ({said}; read from the "
                        f"file's header, nothing was built): was {INFO_FILE} edited, or copied from another run?")


def check_vocabulary(run_dir: str | Path, info: dict[str, Any], tokenizer: Any = None) -> None:
    """DataError when model.json's tokenizer cannot go with the model's embedding rows (its vocab_size,
    which check_header holds against the weights file): a name that is no text, an end-of-text token
    outside the rows, or a tokenizer (`tokenizer`, when the caller has loaded it; `bytes` always) with
    more tokens than the model has rows, whose ids would index past the embedding."""
    path, name = Path(run_dir) / INFO_FILE, info.get("tokenizer")
    rows = resolved_vocab(config_from_info(info))
    if not isinstance(name, str) or not name:
        raise DataError(f"{path}: tokenizer is {name!r}, not a tokenizer's name ('bytes' or a tiktoken encoding)")
    eot = info.get("eot_token")
    if eot is not None and (isinstance(eot, bool) or not isinstance(eot, int) or not 0 <= eot < rows):
        raise DataError(f"{path}: eot_token is {eot!r}, not a token of the model's {rows:,}-row vocabulary")
    if tokenizer is None and name == "bytes":
        tokenizer = get_tokenizer(name)
    if tokenizer is not None and tokenizer.n_vocab > rows:
        raise DataError(f"{path}: its tokenizer {name!r} has {tokenizer.n_vocab:,} tokens but the model's embedding "
                        f"has {rows:,} rows (model.vocab_size): these weights were not trained with it; was "
                        f"{INFO_FILE} edited, or copied from another run?")


def run_note(run_dir: str | Path) -> tuple[str, Optional[str]]:
    """(the run's status as its summary.json says it, or "unknown" without one; a warning when its
    summary shows the weights are not those of a run that finished cleanly, or when it cannot be read
    or holds no JSON object, else None). For mltrain-export and mltrain-sample, which use such weights
    but say so, and record it."""
    path = Path(run_dir) / "summary.json"
    if not os.path.lexists(path):  # weights saved by a script, or a run still going: they speak for themselves
        return "unknown", None
    try:
        summary = json.loads(path.read_bytes())
        why = None if isinstance(summary, dict) else f"holds a JSON {type(summary).__name__}, not an object"
    except OSError as err:
        why = err.strerror or type(err).__name__
    except ValueError as err:  # not JSON, or not UTF-8
        why = f"not JSON: {first_line(err)}"
    if why is not None:
        return (f"unknown (summary.json unreadable: {why})",
                f"{path} cannot be read ({why}): whether these weights are a finished run's is unknown")
    status, steps, planned = summary.get("status", "finished"), summary.get("fine_steps"), summary.get("budget_steps")
    if status == "interrupted":
        return status, (f"{run_dir} holds an interrupted run (stopped at fine step {steps} of {planned}): these are "
                        f"its weights at that step, not a finished run's; resume it with train.resume=true to finish it")
    if status != "finished":
        return str(status), f"{run_dir}: its summary.json says {status!r}, not finished: these weights may not be final"
    val = summary.get("final_val_loss")
    if isinstance(val, (int, float)) and not math.isfinite(val):
        return "diverged", f"{run_dir}: its final held-out loss is {val}: the weights may have diverged"
    if summary.get("skipped_steps"):
        return status, (f"{run_dir}: the run finished but skipped {summary['skipped_steps']} step(s) for a non-finite "
                        f"loss (train.on_nonfinite=skip)")
    return status, None


def load_weights(run_dir: str | Path, device: str | torch.device = "cpu",
                 copies: float = 1.5) -> tuple[GPT, dict[str, Any]]:
    """The run's final model (eval mode, on `device`) and its `model.json` contents. `copies`: how many
    times the weights' size the caller needs free (checked before the model is built)."""
    run_dir = Path(run_dir)
    info = read_info(run_dir)
    config = config_from_info(info)
    check_room(config, copies, "cpu", "loading it")  # the model is built on the CPU first
    check_header(run_dir, config)  # model.json against the weights file's own header, before anything is built
    if torch.device(device).type != "cpu":
        check_room(config, 1.0, device, f"moving it to {device}")
    model = GPT(config)
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
