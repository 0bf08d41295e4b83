"""Data parallel over processes, with PyTorch's own engine (torch.distributed and DDP).

Launch with `torchrun --nproc_per_node=N mltrain ...` (ranks from RANK, WORLD_SIZE, LOCAL_RANK) or as
several SLURM tasks (`srun`, or the submitit launcher with `tasks_per_node=N`: ranks from SLURM_PROCID,
SLURM_NTASKS, SLURM_LOCALID; read by training/world.py `world_from_env`, without torch).
`train.batch_size` stays the *global* batch: rank r of W reads rows [r·B/W, (r+1)·B/W) of the same
global batch (`BatchSampler(rank=, world_size=)`), DDP averages the gradients, so W processes take the
steps one process would, up to float summation order.

Why one DDP wrapper for every level (`Replica`)
-----------------------------------------------
A model a plan trains is a *view*: the fine model's embeddings, final norm and head around some of its
blocks (or blocks the view owns, made by the method's parts). DDP registers an autograd hook on every
parameter of the module it wraps and all-reduces gradient buckets as they fill. There is one wrapper,
over `Replica`: the fine model plus the storage views own, so every trainable parameter has exactly one
hook. A step at any level runs the view's blocks through that wrapper, and every parameter the view
leaves out (`idle`: the other blocks, the storage of other views) is touched by a zero term of
the loss, so it gets a zero gradient and every bucket fills in every step: DDP needs no
`find_unused_parameters` (which walks the step's autograd graph on the host and reads a device map of
used parameters back every step) and reduces buckets while the backward runs. The loss's value is
unchanged (adding 0.0), and the trainer sets those zero gradients back to None before the optimizer
step, so the optimizer skips them exactly as in one process. Every rank runs the same plan, so every
rank uses the same view at the same step. The storage views own must exist before wrapping
(`PlanRunner.storage()` has the run's parts make it for every view of the plan), or its parameters
would not be hooked. Under train.compile the DDP wrapper itself is compiled, so dynamo's
DDP optimizer splits the graph at bucket boundaries and the all-reduces overlap the backward.

Gradient accumulation runs the first grad_accum-1 micro-batches under `no_sync()` (local accumulation)
and reduces once, on the last. Evaluation and the gradient-agreement diagnostics do not go through DDP
(no optimizer step follows them): they run the plain model on the rank's slice and average the results
with `all_reduce` (`mean_`), so the figures equal the one-process figures.

Only rank 0 writes files (metrics, summary, checkpoints, W&B) and logs at INFO; every rank uses the one
Hydra run dir: `prepare_launch()`, called before Hydra composes the config, agrees on one start time
for `${mltrain_now:...}` in the run-dir pattern and keeps ranks > 0 from writing Hydra's own files.

How a rank's process ends (`ends_the_process`, `end_process`)
-------------------------------------------------------------
Without the interpreter's teardown. Once DDP has used the gloo group, torch keeps the group's C++ threads
(two `pt_gloo_runloop` workers, `gloo_tcp_loop`) alive past `destroy_process_group`, and past a
`gc.collect()` after the model is gone (torch 2.13, measured by the threads' names in /proc), so they are
still there while Python finalizes. A worker that then needs the GIL is ended by pthread_exit, and that
unwinding through a C++ noexcept frame calls std::terminate: "terminate called without an active
exception" (or Python's own "Fatal Python error" about a thread of a finalizing runtime), SIGABRT, after
the run had ended and written everything. tests/training/test_distributed_ending.py makes it happen on
purpose (a future's Python callback on a worker); in the CI abort (1 failed test of 1,376, under load)
the likely need is freeing a tensor Python made: a worker drops its collective's inputs (the closing
barrier's) only after the main thread's wait has returned. torch's own destroy_process_group says as
much of hooks that outlive the interpreter. So a rank's process ends as a normal exit does up to that
teardown (the atexit handlers, which flush and close logging's files; the streams flushed) and then with
os._exit: no interpreter teardown and no C++ static destructors, so no thread is left to trip over them.
That is every rank `mltrain` starts (torchrun, srun, ranks by hand: cli.launch) and scripts/syncs.py;
not a job of the SLURM launcher (submitit), whose process is submitit's, which writes the job's result
after the run returns and then exits as Python does.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Iterable, Iterator, NoReturn, Optional, Sequence

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from mltrain.core.errors import ConfigError, MltrainError
from mltrain.training.world import START_TIME_ENV, World, world_from_env

COLLECTIVE_TIMEOUT = timedelta(minutes=30)  # one step, an evaluation or rank 0's checkpoint may take long
RENDEZVOUS_TIMEOUT_ENV = "MLTRAIN_RENDEZVOUS_TIMEOUT_S"
RENDEZVOUS_TIMEOUT_S = 120.0  # ranks started together meet in seconds; missing ones are said in minutes
ANNOUNCE_AFTER_S = 5.0
# What gloo and NCCL say when the other side of a connection is gone.
_PEER_TROUBLE = re.compile(r"gloo|nccl|connection (closed|reset|refused)|closed by peer|broken pipe|"
                           r"timed out|socket", re.IGNORECASE)


class RanksLost(MltrainError):
    """Another rank of the job is gone: the run stopped (its last checkpoint is kept)."""


def _slurm_rendezvous(env: dict) -> None:
    """MASTER_ADDR/MASTER_PORT for SLURM tasks not started by torchrun: the job's first node, and a port
    derived from the job id (so two jobs sharing a node do not collide)."""
    if "MASTER_ADDR" not in env:
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "127.0.0.1"
        if "[" in nodes or "," in nodes:  # a compressed list such as node[01-04]: SLURM expands it
            nodes = subprocess.run(["scontrol", "show", "hostnames", nodes], check=True, capture_output=True,
                                   text=True).stdout.split()[0]
        env["MASTER_ADDR"] = nodes
    env.setdefault("MASTER_PORT", str(20000 + int(env.get("SLURM_JOB_ID", "0") or 0) % 20000))


def init(world: World) -> None:
    """Join the process group (idempotent). CPU tensors go through gloo, CUDA tensors through NCCL, so a
    `device=cpu` run under torchrun works on a GPU machine too. Under torchrun, torchrun has gathered the
    ranks already; otherwise (SLURM tasks, or rank variables set by hand) `rendezvous` waits for them,
    saying so, for a bounded time."""
    if not world.distributed or dist.is_initialized():
        return
    if "RANK" not in os.environ:
        _slurm_rendezvous(os.environ)  # type: ignore[arg-type]
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun: its store, its rendezvous
        dist.init_process_group(backend, rank=world.rank, world_size=world.size, timeout=COLLECTIVE_TIMEOUT)
        return
    store = rendezvous(world)
    dist.init_process_group(backend, store=store, rank=world.rank, world_size=world.size, timeout=COLLECTIVE_TIMEOUT)


def rendezvous_timeout() -> float:
    """Seconds a rank waits for the others to start: MLTRAIN_RENDEZVOUS_TIMEOUT_S, else 120."""
    value = os.environ.get(RENDEZVOUS_TIMEOUT_ENV, "")
    try:
        seconds = float(value) if value else RENDEZVOUS_TIMEOUT_S
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 1e7:
        raise ConfigError(f"{RENDEZVOUS_TIMEOUT_ENV}={value!r} must be a number of seconds > 0")
    return seconds


def rendezvous(world: World) -> "dist.TCPStore":
    """The job's key-value store at MASTER_ADDR:MASTER_PORT (rank 0 serves it) once every rank has joined.
    After a few seconds of waiting each rank says what it waits for; after `rendezvous_timeout()` seconds
    ConfigError says what was missing, instead of a silent half-hour wait for ranks nobody started."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    where = f"rank {world.rank} of {world.size}"
    if not addr or not port or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"{where} (from the environment) needs MASTER_ADDR and MASTER_PORT, rank 0's address and port "
            f"(MASTER_ADDR={addr or 'unset'}, MASTER_PORT={port or 'unset'}): start the job with torchrun "
            f"--nproc_per_node={world.size} ..., set both, or unset RANK/WORLD_SIZE to train in one process")
    timeout = rendezvous_timeout()
    waiting = (f"{where} at {addr}:{port}: waiting up to {timeout:g} s for all {world.size} ranks to start "
               f"({RENDEZVOUS_TIMEOUT_ENV} sets how long)")
    announce = threading.Timer(ANNOUNCE_AFTER_S, lambda: print(waiting, file=sys.stderr, flush=True))
    announce.daemon = True
    announce.start()
    try:
        if not world.is_main:  # reach rank 0 quietly first: torch's client logs a C++ stack on every timeout
            _reachable(addr, int(port), timeout)
        store = dist.TCPStore(addr, int(port), world.size, is_master=world.is_main,
                              timeout=timedelta(seconds=timeout), wait_for_workers=True)
    except (RuntimeError, OSError, ValueError) as err:
        raise ConfigError(
            f"{where}: the {world.size} ranks did not all meet at {addr}:{port} within {timeout:g} s "
            f"({_first_line(err)}); start every rank (torchrun --nproc_per_node={world.size} ... starts them "
            f"together), raise {RENDEZVOUS_TIMEOUT_ENV}, or unset RANK/WORLD_SIZE to train in one process") from None
    finally:
        announce.cancel()
    store.set_timeout(COLLECTIVE_TIMEOUT)
    return store


def _reachable(addr: str, port: int, timeout: float) -> None:
    """Return once something listens at addr:port; TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((addr, port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens at {addr}:{port}: rank 0 has not started") from None
            time.sleep(0.2)


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]


def lost_peer(err: BaseException) -> Optional[str]:
    """The one line for a collective that failed because another rank of the job is gone (killed, crashed,
    its machine unreachable), or None when `err` is something else."""
    if not dist.is_available() or not dist.is_initialized() or isinstance(err, MltrainError):
        return None
    text = str(err)
    if not isinstance(err, getattr(dist, "DistError", ())) and not _PEER_TROUBLE.search(text):
        return None
    world = world_from_env()
    said = re.sub(r"^\[[^\]]*\]\s*", "", _first_line(err)).split(". ")[0]  # gloo's source position off
    return (f"rank {world.rank} of {world.size} lost contact with the other ranks ({said}): another "
            f"process of this job stopped or cannot be reached, so the run stopped; its last checkpoint is kept "
            f"(resume with train.resume=true)")


@contextlib.contextmanager
def one_line_when_a_rank_is_lost() -> Iterator[None]:
    """Turn a collective's failure after another rank died into RanksLost (one line, no gloo traceback)."""
    try:
        yield
    except Exception as err:  # noqa: BLE001 - only what lost_peer recognises is turned into one line
        line = lost_peer(err)
        if line is None:
            raise
        raise RanksLost(line) from None


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def ends_the_process() -> Iterator[None]:
    """Around what a rank does once it has joined the group: the process ends where the block ends
    (`end_process`), after `shutdown`. Status 0 when the block returns, once every rank has returned
    from it (`barrier`: rank 0 writes the summary and weights while the others are done); a SystemExit's
    status (mltrain's one-line errors, Hydra's); 1 after any other exception, its traceback printed first
    as Python would. Only a KeyboardInterrupt goes on up (to the console's one line and exit status)."""
    try:
        yield
        barrier()
        code = 0
    except SystemExit as stop:
        code = exit_status(stop.code)
    except Exception:  # noqa: BLE001 - said as Python would say it, then the same ending
        traceback.print_exc()
        code = 1
    finally:
        shutdown()
    end_process(code)


def exit_status(code: object) -> int:
    """The exit status Python gives `sys.exit(code)`: an int as is, None 0, anything else printed, 1."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def end_process(code: int) -> NoReturn:
    """End this process with `code` as a normal exit would, without the interpreter's teardown (see the
    module docstring for why): the atexit handlers (logging's flush and close, the run dir's clean-up,
    W&B's), then Python's and C's output buffers flushed, then os._exit. mltrain's own threads are
    daemons, which a normal exit does not wait for either."""
    try:
        atexit._run_exitfuncs()  # each handler's error is printed there, as at a normal exit
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or broken stream: nothing more to say there
                stream.flush()
        with contextlib.suppress(Exception):
            ctypes.CDLL(None).fflush(None)  # C stdio's buffers (glog, a C++ extension's printf)
        os._exit(code)


def prepare_launch(argv: list[str]) -> None:
    """Before Hydra starts, under a distributed launch: join the group, agree on one start time (the
    default run dir is named after it) and stop ranks > 0 from writing Hydra's `.hydra/` files into
    the shared run dir. Appends Hydra overrides to `argv` in place; a no-op in a single process."""
    world = world_from_env()
    if not world.distributed:
        return
    init(world)
    start = torch.tensor([time.time()], dtype=torch.float64)
    dist.broadcast(start, src=0)  # a CPU tensor: gloo, even where NCCL is the CUDA backend
    os.environ[START_TIME_ENV] = repr(start.item())  # read by config.start_time
    if not world.is_main:
        argv.append("hydra.output_subdir=null")


def quiet_other_ranks(world: World) -> None:
    """Ranks > 0 log warnings and errors only (rank 0 speaks for the job)."""
    if not world.is_main:
        logging.getLogger("mltrain").setLevel(logging.WARNING)


def check_divisible(world: World, grad_accum: int, **batch_sizes: int) -> Optional[str]:
    """The problem with a global batch size the ranks cannot split evenly into micro-batches, or None."""
    if not world.distributed:
        return None  # config.validate checks divisibility by grad_accum
    for key, value in batch_sizes.items():
        if value % (world.size * grad_accum):
            return (f"{key}={value} is the global batch: it must be divisible by the number of processes "
                    f"({world.size}) x train.grad_accum ({grad_accum}) = {world.size * grad_accum}")
    return None


# ---------------------------------------------------------------------------------------------
# The one DDP wrapper


class Replica(nn.Module):
    """Every parameter any level trains, in one module: the fine model and the storage views own.

    `forward(idx, targets, blocks, step_size)` runs `blocks` (any view's, with its Euler step) between
    the fine model's embeddings and head, so the one DDP wrapper around this module serves every level."""

    def __init__(self, model: nn.Module, storage: Iterable[nn.Module] = ()):
        super().__init__()
        self.model = model
        self.storage = nn.ModuleList(storage)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor, blocks: list[nn.Module], step_size: float = 1.0):
        # the model's own forward, not its __call__: a compiled model is not compiled again inside the
        # compiled wrapper
        return self.model.forward(idx, targets, blocks=blocks, step_size=step_size)


def touch(loss: torch.Tensor, idle: Sequence[nn.Parameter]) -> torch.Tensor:
    """`loss` plus 0 times one element of each idle parameter: the same value, and a zero gradient for each
    of them in the backward, so DDP's buckets fill (see the module docstring). Outside the compiled
    graph, which thus does not depend on which parameters a view leaves out."""
    if not idle:
        return loss
    return loss + torch.stack([p.view(-1)[0] for p in idle]).sum().to(loss.dtype) * 0.0


def wrap(model: nn.Module, storage: Iterable[nn.Module], device: torch.device) -> DistributedDataParallel:
    """One DDP wrapper over the fine model and the storage views own (see the module docstring for why).

    DDP broadcasts rank 0's parameters at construction, so every rank starts from the same weights."""
    return DistributedDataParallel(
        Replica(model, storage),
        device_ids=[device.index] if device.type == "cuda" else None,
        broadcast_buffers=False,  # the model's only buffers are constant causal masks
    )


# ---------------------------------------------------------------------------------------------
# Averages across ranks for measurements (evaluation, diagnostics, logged losses)


def mean_(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Average `tensors` over the ranks, in place (one all_reduce of a flat buffer); a no-op in one
    process. For measurements only: training gradients are averaged by DDP."""
    if not dist.is_initialized() or dist.get_world_size() == 1 or not tensors:
        return tensors
    flat = torch.cat([t.detach().reshape(-1).float() for t in tensors])
    dist.all_reduce(flat)  # SUM: gloo has no AVG
    flat /= dist.get_world_size()
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset : offset + n].view_as(t))
        offset += n
    return tensors


def gather_rows(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's `tensor` concatenated along dim 0 in rank order (all the same shape); `tensor` itself
    in one process. Rank r's slice of a global batch holds rows [r·B/W, (r+1)·B/W), so gathering the
    slices gives back the whole batch."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts)


def all_ranks_agree(flag: torch.Tensor) -> bool:
    """`flag` (a boolean scalar) is true on every rank: one host sync, plus one all_reduce (MIN) under
    data parallel, so every rank takes the same decision (a step skipped, a run stopped)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return bool(flag)
    value = flag.detach().reshape(1).float().cpu()  # gloo reduces CPU tensors; one scalar is cheap to move
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value.item())


def agree_on_device(flag: torch.Tensor) -> torch.Tensor:
    """`flag` (a boolean scalar) and-ed over the ranks, left on its device: no host sync (one all_reduce,
    MIN, under data parallel; NCCL for a CUDA tensor, gloo for a CPU one)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return flag
    value = flag.detach().reshape(1).to(torch.float32)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return value[0] > 0.5


def barrier() -> None:
    """Wait for every rank. A CPU all_reduce (gloo) rather than dist.barrier(), which under NCCL would
    touch the current CUDA device before each rank has chosen its own."""
    if dist.is_initialized():
        dist.all_reduce(torch.zeros(1))

