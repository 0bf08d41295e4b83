"""Side-by-side cost of the multilevel pieces, measured in one process.

Prints, for one model size: tokens/s and FLOP/s of a fine step and of a coarse (even-block) step
through mltrain's Trainer.step, the same fine step as a bare PyTorch loop (the overhead of our step
function), the time of one prolongation, and the peak memory of a short multilevel run versus a
single-level run (each in its own child process, since CPU peak RSS cannot be reset; on CUDA,
max_memory_allocated in the same process).

    python scripts/bench_multilevel.py                  # tiny model, bytes vocabulary, CPU
    python scripts/bench_multilevel.py --preset gpt22m  # the paper's 22.4M model (vocab 50257)

Figures are medians over --repeats timed blocks of --steps steps each, interleaved (fine, coarse,
bare, fine, coarse, bare, ...) so that a noisy machine slows all of them alike; compare the ratios.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import time

import torch
from omegaconf import OmegaConf

from mltrain.coarsening import Hierarchy, scheme_class
from mltrain.flops import train_flops_per_step
from mltrain.model import GPT, GPTConfig
from mltrain.optim import build_optimizer
from mltrain.trainer import Trainer

PRESETS = {
    "tiny": dict(vocab_size=256, n_layer=6, n_embd=128, n_head=4, block_size=64, batch=16),
    "gpt22m": dict(vocab_size=50257, n_layer=12, n_embd=256, n_head=8, block_size=256, batch=8),
}


class RandomBatches:
    """Random token batches; the data path is not what is measured here."""

    def __init__(self, vocab: int, batch: int, block: int, seed: int = 0):
        self.g = torch.Generator().manual_seed(seed)
        self.shape, self.vocab = (batch, block), vocab

    def next_batch(self):
        x = torch.randint(0, self.vocab, self.shape, generator=self.g)
        return x, torch.roll(x, -1, dims=1)


def setup(p: dict, device: torch.device):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**{k: v for k, v in p.items() if k != "batch"})).to(device)
    sgd = OmegaConf.create({"name": "sgd", "lr": 1e-3, "momentum": 0.9, "nesterov": False, "weight_decay": 0.0})
    train_cfg = OmegaConf.create({"grad_accum": 1, "grad_clip": 1.0, "progress": False, "eval_batches": 1})
    dtype = torch.bfloat16 if device.type == "cuda" else None
    trainer = Trainer(model, train_cfg, device, dtype, None, lambda row: None)
    h = Hierarchy(model, scheme_class("stride")(k=2), 0.25)
    fine_opt = build_optimizer(model.parameters(), sgd, device)
    coarse_opt = build_optimizer(model.parameters(), sgd, device)
    return model, trainer, h, fine_opt, coarse_opt, sgd


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, steps: int, device) -> float:
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / steps


def speed(args, p, device):
    model, trainer, h, fine_opt, coarse_opt, sgd = setup(p, device)
    batches = RandomBatches(p["vocab_size"], p["batch"], p["block_size"])
    fine, coarse = h.fine, h.view((0,))
    bare_opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    params = list(model.parameters())

    def bare_step():  # the loop people would otherwise fork
        x, y = batches.next_batch()
        x, y = x.to(device), y.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        bare_opt.step()
        bare_opt.zero_grad(set_to_none=True)

    runs = {
        "fine": lambda: trainer.step(fine, fine_opt, 1e-3, batches, "fine"),
        "coarse": lambda: trainer.step(coarse, coarse_opt, 1e-3, batches, "coarse"),
        "bare fine loop": bare_step,
    }
    for fn in runs.values():  # warm-up (allocator, lazy optimizer state)
        timed(fn, 2, device)
    times = {k: [] for k in runs}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            times[name].append(timed(fn, args.steps, device))
    prolong = []
    for _ in range(args.repeats):
        sync(device)
        t0 = time.perf_counter()
        h.prolong(coarse)
        sync(device)
        prolong.append(time.perf_counter() - t0)

    tokens = p["batch"] * p["block_size"]
    med = {k: statistics.median(v) for k, v in times.items()}
    flops = {"fine": train_flops_per_step(p["n_layer"], p["n_embd"], p["vocab_size"], p["block_size"], p["batch"]),
             "coarse": train_flops_per_step(p["n_layer"] // 2, p["n_embd"], p["vocab_size"], p["block_size"], p["batch"])}
    flops["bare fine loop"] = flops["fine"]
    print(f"\nmodel {args.preset}: {model.num_params():,} params, batch {p['batch']}x{p['block_size']}, device {device}, "
          f"{torch.get_num_threads()} threads; medians of {args.repeats} x {args.steps} steps")
    print(f"{'step':<16}{'ms/step':>10}{'tokens/s':>12}{'GFLOP/s':>10}{'FLOPs vs fine':>15}{'time vs fine':>14}")
    for k in runs:
        print(f"{k:<16}{med[k] * 1e3:>10.1f}{tokens / med[k]:>12,.0f}{flops[k] / med[k] / 1e9:>10.2f}"
              f"{flops[k] / flops['fine']:>15.3f}{med[k] / med['fine']:>14.3f}")
    print(f"prolongation (evenodd A -> fine, δ-mix of {len(coarse.groups)} blocks): "
          f"median {statistics.median(prolong) * 1e3:.2f} ms = {statistics.median(prolong) / med['fine']:.3f} fine steps")


def memory_child(args, p, multilevel: bool, queue):
    device = torch.device(args.device)
    model, trainer, h, fine_opt, _, sgd = setup(p, device)
    batches = RandomBatches(p["vocab_size"], p["batch"], p["block_size"])
    coarse_opts = {}
    for cycle in range(3):
        trainer.step(h.fine, fine_opt, 1e-3, batches, "fine")
        if multilevel:
            for c in (0, 1):
                view = h.view((c,))
                opt = coarse_opts.setdefault(c, build_optimizer(model.parameters(), sgd, device))
                for _ in range(3):
                    trainer.step(view, opt, 1e-3, batches, "coarse")
                h.prolong(view)
    if device.type == "cuda":
        queue.put(torch.cuda.max_memory_allocated(device))
    else:
        queue.put(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def memory(args, p):
    ctx = mp.get_context("spawn")
    peaks = {}
    for name, ml in (("single level", False), ("multilevel", True)):
        q = ctx.Queue()
        proc = ctx.Process(target=memory_child, args=(args, p, ml, q))
        proc.start()
        peaks[name] = q.get()
        proc.join()
    what = "max_memory_allocated" if args.device == "cuda" else "peak RSS of the process"
    print(f"peak memory ({what}), 3 cycles: single {peaks['single level'] / 2**20:.1f} MiB, "
          f"multilevel {peaks['multilevel'] / 2**20:.1f} MiB, ratio {peaks['multilevel'] / peaks['single level']:.3f} "
          f"(multilevel adds one SGD momentum buffer per coarse model: "
          f"{2 * sum(x.numel() for x in GPT(GPTConfig(**{k: v for k, v in p.items() if k != 'batch'})).parameters()) * 4 / 2**20:.1f} MiB at most)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=5, help="steps per timed block")
    ap.add_argument("--repeats", type=int, default=5, help="timed blocks per kind (median reported)")
    ap.add_argument("--no-memory", action="store_true")
    args = ap.parse_args()
    p = PRESETS[args.preset]
    speed(args, p, torch.device(args.device))
    if not args.no_memory:
        memory(args, p)


if __name__ == "__main__":
    main()
