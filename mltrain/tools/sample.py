"""mltrain-sample: text from a finished run's weights.

    mltrain-sample RUN --prompt "The Python" --max-new-tokens 200 --temperature 0.8 --top-k 40 --seed 0

Reads RUN/model.safetensors and RUN/model.json (mltrain/runs/weights.py; every field of model.json and
the model's size are checked before anything is allocated), encodes the prompt with the run's own
tokenizer, and samples one token at a time from the last `block_size` tokens (the model has no
positions beyond its context). The text is written as it is generated, with memory that does not grow
with its length: `--max-new-tokens 100000000` streams until Ctrl-C (one line, exit status 130), and
`mltrain-sample ... | head` stops quietly when `head` has read enough. The same seed gives the same text
on the same machine and device.
"""

from __future__ import annotations

import argparse
import codecs
import math
import os
import sys
from typing import IO, Iterator, Optional, Sequence

import torch

from mltrain.data import Tokenizer, get_tokenizer
from mltrain.core.errors import ConfigError, DataError, report, tool_main
from mltrain.model.gpt import GPT
from mltrain.model.settings import resolved_vocab
from mltrain.training.devices import resolve_device
from mltrain.runs.weights import INFO_FILE, check_vocabulary, load_weights, read_info, run_note

PROG = "mltrain-sample"
SEPARATOR = "\n\n---\n\n"  # between samples
BROKEN_PIPE_EXIT = 128 + 13  # the status of a writer whose reader went away (SIGPIPE), as `yes | head`


def _pick(logits: torch.Tensor, temperature: float, top_k: Optional[int],
          generator: Optional[torch.Generator]) -> torch.Tensor:
    """One next token per row of `logits`. The largest logit is subtracted before dividing by the
    temperature, so even a temperature of 1e-45 gives finite probabilities (all on the likeliest)."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = (logits - logits.max(dim=-1, keepdim=True).values) / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if not torch.isfinite(probs).all():
        raise DataError("the model's output is not finite: its weights hold NaN or infinity")
    return torch.multinomial(probs, 1, generator=generator)


@torch.no_grad()
def stream(
    model: GPT,
    ids: list[int],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    vocab_limit: Optional[int] = None,
) -> Iterator[int]:
    """Token ids sampled after `ids`, one at a time; only the last `block_size` tokens are kept.

    temperature 0 is greedy (argmax); top_k keeps only the k likeliest tokens; vocab_limit masks ids at
    and above it (a vocabulary padded past the tokenizer's, e.g. 50304, has rows no tokenizer can decode).
    """
    if not ids:
        raise ValueError("generate needs at least one token of context")
    block_size = model.config.block_size
    context = torch.tensor([ids[-block_size:]], dtype=torch.long, device=model.wte.weight.device)
    for _ in range(max_new_tokens):
        logits, _ = model(context)
        nxt = _pick(logits[:, -1, :vocab_limit].float(), temperature, top_k, generator)
        context = torch.cat([context, nxt], dim=1)[:, -block_size:]
        yield int(nxt)


def generate(model: GPT, ids: list[int], max_new_tokens: int, temperature: float = 1.0, top_k: Optional[int] = None,
             generator: Optional[torch.Generator] = None, vocab_limit: Optional[int] = None) -> list[int]:
    """`max_new_tokens` token ids sampled after `ids` (not included in the result); see `stream`."""
    return list(stream(model, ids, max_new_tokens, temperature, top_k, generator, vocab_limit))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Generate text with a finished run's final weights.")
    p.add_argument("run", help="run directory (holds model.safetensors and model.json)")
    p.add_argument("--prompt", default="", help="text to continue (default: start of a new document)")
    p.add_argument("--max-new-tokens", type=int, default=200, metavar="N", help="tokens to generate (default 200)")
    p.add_argument("--temperature", type=float, default=0.8, help="softmax temperature; 0 is greedy (default 0.8)")
    p.add_argument("--top-k", type=int, default=None, metavar="K", help="sample only from the K likeliest tokens")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--num-samples", type=int, default=1, metavar="N", help="independent samples (default 1)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="default: cuda if present")
    return p


def _check(args: argparse.Namespace) -> None:
    if args.max_new_tokens < 0:
        raise ConfigError(f"--max-new-tokens {args.max_new_tokens}: must be >= 0")
    if not (args.temperature >= 0 and math.isfinite(args.temperature)):
        raise ConfigError(f"--temperature {args.temperature}: must be a finite number >= 0 (0 is greedy)")
    if args.top_k is not None and args.top_k < 1:
        raise ConfigError(f"--top-k {args.top_k}: must be >= 1")
    if args.num_samples < 1:
        raise ConfigError(f"--num-samples {args.num_samples}: must be >= 1")
    if not 0 <= args.seed < 2**63:
        raise ConfigError(f"--seed {args.seed}: must be in [0, 2**63)")
    try:
        args.prompt.encode("utf-8")
    except UnicodeEncodeError as err:  # bytes the shell passed that are not UTF-8 (Python keeps them as surrogates)
        byte = ord(args.prompt[err.start]) & 0xFF
        raise ConfigError(f"--prompt is not valid UTF-8 text (byte 0x{byte:02x} at character {err.start}); "
                          f"give the prompt as UTF-8") from None


def _write(out: IO[str], text: str) -> None:
    if text:
        out.write(text)
        out.flush()


def write_samples(args: argparse.Namespace, out: Optional[IO[str]] = None) -> int:
    """Write the samples to `out` as they are generated (prompt included, separated by SEPARATOR, a
    newline at the end); returns how many tokens were generated. Every input is checked before the
    weights are read."""
    _check(args)
    out = sys.stdout if out is None else out
    info = read_info(args.run)
    tokenizer: Tokenizer = get_tokenizer(str(info.get("tokenizer")), key=f"{args.run}/{INFO_FILE}: tokenizer",
                                         bytes_alternative=False)
    check_vocabulary(args.run, info, tokenizer)
    device = resolve_device(args.device)
    prompt_ids = tokenizer.encode(args.prompt) if args.prompt else tokenizer.separator  # a fresh document
    _, note = run_note(args.run)
    if note:  # an interrupted run's weights, or a run whose end is unknown: sampled, but said first
        report(PROG, note + "; sampling from them as they are", kind="warning")
    model, _ = load_weights(args.run, device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    vocab_limit = min(tokenizer.n_vocab, resolved_vocab(model.config))
    made = 0
    for i in range(args.num_samples):
        _write(out, (SEPARATOR if i else "") + args.prompt)
        text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span tokens
        for token in stream(model, prompt_ids, args.max_new_tokens, args.temperature, args.top_k, generator,
                            vocab_limit):
            made += 1
            _write(out, text.decode(tokenizer.token_bytes(token)))
        _write(out, text.decode(b"", final=True))
    _write(out, "\n")
    return made


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush finds no closed pipe to complain about."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture): nothing to flush
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _sample(args: argparse.Namespace) -> int:
    write_samples(args)
    return 0  # the number of tokens written is not an exit status


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return tool_main(PROG, _parser(), _sample, argv)
    except BrokenPipeError:  # `mltrain-sample ... | head`: the reader has what it wanted
        _quiet_stdout()
        return BROKEN_PIPE_EXIT
    except KeyboardInterrupt:  # Ctrl-C: what was written stays; end the line, say so
        try:
            sys.stdout.write("\n")
            sys.stdout.flush()
        except (ValueError, OSError, KeyboardInterrupt):  # a closed pipe, or Ctrl-C pressed again
            _quiet_stdout()
        report(PROG, "stopped by Ctrl-C; the text above is what was generated", kind="interrupted")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
