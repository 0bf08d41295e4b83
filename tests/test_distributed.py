"""Data parallel on CPU with gloo: 2 torchrun processes train like 1 process with the same global batch.

Tolerance: the two processes average two half-batch gradients where one process takes the mean over
the whole batch, so sums are taken in another order; after a few dozen steps the losses agree to
~5e-7 (measured). The tests allow 1e-5 (absolute, on losses of order 1-5), far below any real
difference (a wrong average, a missed reduction or a rank reading the wrong slice moves them by 1e-2
or more).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from mltrain.config import register_configs
from mltrain.distributed import World, check_divisible, world_from_env
from mltrain.run import run

register_configs()

TOL = 1e-5
TINY = ["model.n_layer=4", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=8",
        "train.max_steps=16", "train.eval_interval=8", "train.eval_batches=2", "train.log_interval=2",
        "train.progress=false", "schedule.warmup_steps=2", "optim.lr=0.05", "device=cpu"]
ML = ["multilevel.n_cycles=2", "multilevel.coarse_steps=3", "multilevel.coarse_log_interval=1"]


def test_ranks_come_from_torchrun_then_slurm_then_default():
    assert world_from_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == World(3, 1, 4)
    torchrun_inside_slurm = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    assert world_from_env(torchrun_inside_slurm) == World(1, 1, 2)
    assert world_from_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}) == World(5, 1, 8)
    assert world_from_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) == World()
    assert world_from_env({}) == World() and not World().distributed and World().is_main


def test_global_batch_must_split_over_ranks_and_micro_batches():
    assert check_divisible(World(0, 0, 4), 2, **{"train.batch_size": 16}) is None
    problem = check_divisible(World(0, 0, 4), 2, **{"train.batch_size": 12})
    assert "train.batch_size=12" in problem and "(4) x train.grad_accum (2) = 8" in problem
    assert check_divisible(World(), 3, **{"train.batch_size": 7}) is None  # one process: config.validate's job


def one_process(tmp_path: Path, overrides: list[str]):
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    run(cfg, run_dir=tmp_path)
    return read_run(tmp_path)


def torchrun(cwd: Path, overrides: list[str], nproc: int = 2) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "mltrain.cli", *overrides]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def read_run(run_dir: Path):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return rows, json.loads((run_dir / "summary.json").read_text())


def losses(rows):
    """(kind, step, level, value) of every loss row, in order: train, held-out and diagnostics."""
    out = []
    for r in rows:
        for key in ("train/loss", "val/loss", "val/loss_se", "diag/coarse_loss", "diag/fine_loss", "diag/grad_cosine"):
            if key in r:
                out.append((key, r["step"], r.get("level"), r[key]))
    return out


def assert_same_training(a, b):
    (rows_a, sum_a), (rows_b, sum_b) = a, b
    la, lb = losses(rows_a), losses(rows_b)
    assert [x[:3] for x in la] == [x[:3] for x in lb]
    for x, y in zip(la, lb):
        assert y[3] == pytest.approx(x[3], abs=TOL), x[:3]
    for key in ("fine_steps", "tokens", "total_flops", "coarse_steps"):
        assert sum_a.get(key) == sum_b.get(key), key
    assert sum_b["final_val_loss"] == pytest.approx(sum_a["final_val_loss"], abs=TOL)


@pytest.mark.slow
@pytest.mark.parametrize("name,extra", [
    ("single", []),
    # grad_accum=2: the first micro-batch of each rank runs under no_sync, the second reduces
    ("evenodd", ["coarsening=evenodd", *ML, "train.grad_accum=2"]),
    # coarse blocks with storage of their own, created before the DDP wrapper; Euler steps of size k
    ("average", ["coarsening=average", "coarsening.step_scale=stride", *ML]),
])
def test_two_processes_train_like_one_with_the_same_global_batch(tmp_path, name, extra):
    overrides = [*TINY, *extra]
    single = one_process(tmp_path / "one", overrides)

    proc = torchrun(tmp_path, overrides)  # no hydra.run.dir: both ranks must agree on the default one
    assert proc.returncode == 0, proc.stderr[-4000:]
    run_dirs = [p.parent for p in (tmp_path / "outputs").rglob("summary.json")]
    assert len(run_dirs) == 1, run_dirs  # one run dir for the two ranks
    assert len(list((tmp_path / "outputs").glob("*/*"))) == 1
    two = read_run(run_dirs[0])
    assert two[1]["world_size"] == 2 and single[1]["world_size"] == 1
    assert_same_training(single, two)
    # Rank 0 alone logs: one line per event, not two.
    assert (run_dirs[0] / ".hydra" / "config.yaml").is_file()
    log_text = "".join(p.read_text() for p in run_dirs[0].glob("*.log"))
    assert log_text.count("done:") == 1


@pytest.mark.slow
def test_a_global_batch_the_ranks_cannot_split_is_one_error_line(tmp_path):
    proc = torchrun(tmp_path, [*TINY, "train.batch_size=6", "train.grad_accum=2", f"hydra.run.dir={tmp_path / 'r'}"])
    assert proc.returncode != 0
    assert "train.batch_size=6 is the global batch: it must be divisible by the number of processes (2)" in proc.stderr
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


# ---------------------------------------------------------------------------------------------
# Resume across world sizes, with mltrain/checkpoint.py: rank 0 writes the runner's state (weights,
# optimizers, plan position, sampler positions — global batch indices, independent of the ranks), and
# any number of processes can continue from it.

RESUME = [*TINY, "coarsening=evenodd", *ML]


def in_torchrun(tmp_path: Path, stop_at: int, load: str, save: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    script = Path(__file__).with_name("distributed_resume.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
           json.dumps(RESUME), str(stop_at), load, str(save)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]


def in_process(stop_at: int = -1, load: str = ""):
    import torch  # noqa: F401  (the session below runs in this process)

    from mltrain.checkpoint import load_checkpoint
    from mltrain.run import build

    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = compose("config", overrides=RESUME)
    session = build(cfg, lambda row: None)
    state = session.trainer.state
    if load:
        load_checkpoint(load, session.runner)
    session.runner.run(should_stop=lambda: stop_at >= 0 and
                       state.fine_steps + state.coarse_steps + state.control_steps >= stop_at)
    return session


def assert_same_state(a: dict, b: dict) -> None:
    import torch

    assert a["train_state"] == b["train_state"]
    assert a["samplers"] == b["samplers"]
    for name, tensor in a["model"].items():
        assert torch.allclose(tensor, b["model"][name], rtol=0, atol=TOL), name


@pytest.mark.slow
@pytest.mark.parametrize("stop_at", [5])  # inside cycle 0's first coarse phase
def test_a_checkpoint_written_by_two_processes_resumes_in_one_and_back(tmp_path, stop_at):
    import torch

    from mltrain.checkpoint import save_checkpoint

    whole = in_process()
    save_checkpoint(tmp_path / "whole.pt", whole.runner)
    expected = torch.load(tmp_path / "whole.pt", weights_only=True)

    # 2 processes stop mid coarse phase; 1 process finishes the run
    in_torchrun(tmp_path, stop_at, "", tmp_path / "two.pt")
    assert torch.load(tmp_path / "two.pt", weights_only=True)["train_state"]["coarse_steps"] == stop_at - 1
    resumed_in_one = in_process(load=str(tmp_path / "two.pt"))
    save_checkpoint(tmp_path / "one_end.pt", resumed_in_one.runner)
    assert_same_state(expected, torch.load(tmp_path / "one_end.pt", weights_only=True))

    # 1 process stops there; 2 processes finish the run
    stopped = in_process(stop_at=stop_at)
    save_checkpoint(tmp_path / "one.pt", stopped.runner)
    in_torchrun(tmp_path, -1, str(tmp_path / "one.pt"), tmp_path / "two_end.pt")
    assert_same_state(expected, torch.load(tmp_path / "two_end.pt", weights_only=True))
