"""Data parallel on CPU with gloo: 2 torchrun processes train like 1 process with the same global batch.

Tolerance: the two processes average two half-batch gradients where one process takes the mean over
the whole batch, so sums are taken in another order; after a few dozen steps the losses agree to
~5e-7 (measured). The tests allow 1e-5 (absolute, on losses of order 1-5), far below any real
difference (a wrong average, a missed reduction or a rank reading the wrong slice moves them by 1e-2
or more)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from helpers import made_once, read_rows, run_tool_here, typed

from mltrain.config import register_configs
from mltrain.run import run


register_configs()

TOL = 1e-5
TINY = ["model.n_layer=4", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=8",
        "train.max_steps=16", "train.eval_interval=8", "train.eval_tokens=256", "train.log_interval=2",
        "train.progress=false", "schedule.warmup_steps=2", "optim.lr=0.05", "device=cpu"]
ML = ["multilevel.n_cycles=2", "multilevel.coarse_steps=3", "multilevel.coarse_log_interval=1"]
CHECKPOINTS = ["train.checkpoint_interval=1", "train.keep_checkpoints=1000"]  # a checkpoint at every step, all kept


def one_process(tmp_path: Path, overrides: list[str]):
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    run(typed(cfg), run_dir=tmp_path)
    return read_run(tmp_path)


# A sitecustomize for the ranks: says so when Python's teardown clears it. A rank ends with os._exit, never
# in that teardown, where gloo's threads, alive past destroy_process_group, can abort it (SIGABRT,
# "terminate called without an active exception": training/distributed.py, "How a rank's process ends").
TEARDOWN_PROBE = """
import os


class _Teardown:
    def __del__(self):
        os.write(2, f"rank {os.environ['RANK']}: {TEARDOWN}\\n".encode())


if "RANK" in os.environ:
    _teardown = _Teardown()
"""
TEARDOWN = "went through Python's teardown"


def torchrun(cwd: Path, overrides: list[str], nproc: int = 2) -> subprocess.CompletedProcess:
    probe = cwd / "teardown_probe"
    probe.mkdir(exist_ok=True)
    (probe / "sitecustomize.py").write_text(f"TEARDOWN = {TEARDOWN!r}\n{TEARDOWN_PROBE}")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(probe), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "mltrain.cli", *overrides]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def read_run(run_dir: Path):
    rows = read_rows(run_dir)
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


# No plain "single" case: single-level training under 2 ranks is "single odd held-out"'s, and the held-out set
# the ranks split evenly (TINY's 16 sequences) is every other case's.
@pytest.mark.parametrize("name,extra", [
    # single-level training; a held-out set the ranks split unevenly (13 sequences), in forward passes of 2
    # (the last one padded)
    ("single odd held-out", ["train.eval_tokens=208", "train.eval_batch_size=3"]),
    # grad_accum=2: the first micro-batch of each rank runs under no_sync, the second reduces; a checkpoint
    # at every step: the two-process run is the one the resume test below stops (RESUME, made once)
    ("evenodd", ["coarsening=evenodd", *ML, "train.grad_accum=2", *CHECKPOINTS]),
    # coarse blocks with storage of their own, created before the DDP wrapper; Euler steps of size k
    ("average", ["coarsening=average", "coarsening.step_scale=stride", *ML]),
    # a rival method's random sub-paths: every rank must draw the same blocks at every step
    ("layer_drop", ["experiment=layer_drop", "layer_drop.gamma=0.3"]),
    # the DDP wrapper compiled (dynamo's DDP optimizer), coarse steps leaving half the blocks idle
    ("evenodd compiled", ["coarsening=evenodd", *ML, "train.compile=true"]),
    # compiled with per-step 1/p as a tensor, a different set of blocks idle at every step
    ("layer_drop compiled", ["experiment=layer_drop", "layer_drop.gamma=0.3", "train.compile=true"]),
])
def test_two_processes_train_like_one_with_the_same_global_batch(tmp_path, monkeypatch, request, name, extra):
    monkeypatch.setenv("MLTRAIN_COMPILE_BACKEND", "aot_eager")  # the same graphs, compiled in seconds
    overrides = [*TINY, *extra]
    single = one_process(tmp_path / "one", overrides)

    if overrides == RESUME:  # made once, for the resume test too
        where, proc = request.getfixturevalue("two_processes_resumable")
    else:
        where, proc = tmp_path, torchrun(tmp_path, overrides)  # no hydra.run.dir: both ranks must agree on the default one
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert TEARDOWN not in proc.stderr  # each rank ended with os._exit once its run had ended
    run_dirs = [p.parent for p in (where / "outputs").rglob("summary.json")]
    assert len(run_dirs) == 1, run_dirs  # one run dir for the two ranks
    assert len(list((where / "outputs").glob("*/*"))) == 1
    two = read_run(run_dirs[0])
    assert two[1]["world_size"] == 2 and single[1]["world_size"] == 1
    assert_same_training(single, two)
    # Rank 0 alone logs: one line per event, not two.
    assert (run_dirs[0] / ".hydra" / "config.yaml").is_file()
    log_text = "".join(p.read_text() for p in run_dirs[0].glob("*.log"))
    assert log_text.count("done:") == 1


def test_a_global_batch_the_ranks_cannot_split_is_one_error_line(tmp_path):
    proc = torchrun(tmp_path, [*TINY, "train.batch_size=6", "train.grad_accum=2", f"hydra.run.dir={tmp_path / 'r'}"])
    assert proc.returncode != 0
    assert "train.batch_size=6 is the global batch: it must be divisible by the number of processes (2)" in proc.stderr
    assert TEARDOWN not in proc.stderr  # a refused run's ranks end with os._exit too, with their status
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


# ---------------------------------------------------------------------------------------------
# Resume across world sizes, through the CLI: rank 0 writes the job's checkpoints (weights, optimizers,
# plan position, sampler positions: global batch indices, independent of the ranks), and a run resumed
# with `train.resume=true` in any number of processes ends where the uninterrupted run ends.

RESUME = [*TINY, "coarsening=evenodd", *ML, "train.grad_accum=2", *CHECKPOINTS]


@pytest.fixture(scope="module")
def two_processes_resumable(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """RESUME trained by 2 torchrun processes into the default run dir, once for the suite (helpers.made_once):
    (this test process's copy of the folder it ran in, the launcher's status and stderr). The "evenodd" case
    above checks it trains like one process; the resume test stops it."""
    def make(folder: Path) -> None:
        proc = torchrun(folder, RESUME)
        (folder / "launcher.json").write_text(json.dumps({"returncode": proc.returncode, "stderr": proc.stderr}))

    where = made_once(tmp_path_factory, "two_processes_resumable", make)
    launcher = json.loads((where / "launcher.json").read_text())
    return where, subprocess.CompletedProcess([], launcher["returncode"], "", launcher["stderr"])


def mltrain_cli(cwd: Path, overrides: list[str]) -> subprocess.CompletedProcess:
    """One process's run, `python -m mltrain.cli overrides`, in this one (helpers.run_tool_here): no rank."""
    return run_tool_here("mltrain", *overrides, cwd=cwd, env={"OMP_NUM_THREADS": "1"})


def mid_coarse_checkpoint(run_dir: Path) -> Path:
    """The first checkpoint taken inside a coarse phase (not at its start or end)."""
    import torch

    for path in sorted((run_dir / "checkpoints").glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[2])):
        runner = torch.load(path, weights_only=True)["runner"]
        state, at = runner["train_state"], runner["position"]
        if state["steps"].get("coarse", 0) > 0 and at["step_in_phase"] > 0 and state["steps"].get("fine", 0) < 16:
            return path
    raise AssertionError(f"no checkpoint inside a coarse phase in {run_dir}")


def stopped_at(run_dir: Path, checkpoint: Path, dest: Path) -> Path:
    """`dest`: the run dir as it was when `checkpoint` was written, as if the run had been killed right
    after it: its config, metrics.jsonl up to then (the checkpoint records how far), that checkpoint."""
    import shutil

    import torch

    dest.mkdir()
    shutil.copytree(run_dir / ".hydra", dest / ".hydra")
    extra = torch.load(checkpoint, weights_only=True)["extra"]
    (dest / "metrics.jsonl").write_bytes((run_dir / "metrics.jsonl").read_bytes()[: extra["metrics_bytes"]])
    (dest / "checkpoints").mkdir()
    shutil.copy2(checkpoint, dest / "checkpoints" / checkpoint.name)
    return dest


def final_weights(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(run_dir / "model.safetensors")


def assert_close_weights(a: dict, b: dict) -> None:
    import torch

    assert a.keys() == b.keys()
    for name, tensor in a.items():
        assert torch.allclose(tensor, b[name], rtol=0, atol=TOL), name


def test_a_checkpoint_written_by_two_processes_resumes_in_one_and_back(tmp_path, two_processes_resumable):
    where, proc = two_processes_resumable  # the "evenodd" case's two-process run
    assert proc.returncode == 0, proc.stderr[-4000:]
    (two,) = [p.parent for p in (where / "outputs").rglob("summary.json")]
    one = tmp_path / "one"
    proc = mltrain_cli(tmp_path, [*RESUME, f"hydra.run.dir={one}"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert_close_weights(final_weights(one), final_weights(two))  # the equivalence, at the end

    # written by 2 processes inside a coarse phase, resumed by 1 through the CLI
    two_stopped = stopped_at(two, mid_coarse_checkpoint(two), tmp_path / "two_stopped")
    proc = mltrain_cli(tmp_path, [*RESUME, f"hydra.run.dir={two_stopped}", "train.resume=true"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert_close_weights(final_weights(two), final_weights(two_stopped))
    assert_same_training(read_run(two), read_run(two_stopped))

    # written by 1 process, resumed by 2
    one_stopped = stopped_at(one, mid_coarse_checkpoint(one), tmp_path / "one_stopped")
    proc = torchrun(tmp_path, [*RESUME, f"hydra.run.dir={one_stopped}", "train.resume=true"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert_close_weights(final_weights(one), final_weights(one_stopped))
    assert_same_training(read_run(one), read_run(one_stopped))
