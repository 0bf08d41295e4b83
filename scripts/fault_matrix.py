"""Run mltrain's fault matrix (bad input and faults a user meets) against one or more source trees and
print the outcomes by class.

    python scripts/fault_matrix.py                                  # the installed mltrain
    python scripts/fault_matrix.py --src before=/tmp/main --src after=.   # two trees side by side
    python scripts/fault_matrix.py --round 2 --src before=/tmp/main --src after=.  # round two's classes only

Every case is a bad input or a fault a user meets (a typo'd key, NaN, a read-only folder, a full disk,
two runs in one folder, ...), run through the console entry points in a fresh temporary folder, each in
its own process. Outcomes:

    good       one clear error line (exit 2, or 130 for Ctrl-C), no traceback, earlier output
               unchanged; or, for a case that must succeed, success
    traceback  a Python traceback on the console
    wrong      finished "successfully" with a wrong result (a key or a value silently ignored, a binary
               file trained on, a run refused that should have run, a line that says the wrong thing,
               a secret recorded, a process left behind)
    lost       earlier output changed (a file outside the run written through a link included), or
               two runs' rows in one file
    hung       still running when the case's time ran out (round two's cases; round one's count it wrong)
    unclear    failed without a traceback but not with one clear line naming the problem

Round one (issue 11): runs that mix, keys that vanish, values that slip through, ordinary trouble, full
disk, data that is not text, expensive before cheap. Round two (issue 20): writes through links,
foreign or damaged state, records overwritten, unbounded resources, distributed faults, lines that lie,
the tools' edges (mltrain-sample and mltrain-export), secrets. Round three (issue 27): the study and the
tools around a run: writes through links (study, compare, export, prepare), a study's state from its
config, numbers without common sense (and runs far longer than the machine can give), caches and
sidecars, lossy input, partial results, errors that name the problem, stalls and noise at the edges.

A `--src` tree is put first on PYTHONPATH (its `conf/` is linked as `mltrain/conf` when missing), so a
checkout of any commit can be measured with the same venv: `git archive main | tar -x -C /tmp/main`.
Cases that could allocate a huge model run under a 6 GB address-space limit.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Optional

ERROR_WORDS = re.compile(r"error|traceback|exception|: interrupted:", re.IGNORECASE)  # the Ctrl-C line too
OUTCOMES = ["good", "traceback", "wrong", "lost", "hung", "unclear"]
SMOKE = ["scale=smoke", "train.progress=false"]
TINY = ["model.n_layer=2", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=4",
        "train.progress=false", "train.eval_batches=2"]
PREPARE = ["prepare.tokenizer=bytes", "prepare.shard_tokens=2000", "prepare.val_tokens=1000",
           "prepare.progress=false", "prepare.docs_per_task=4", "prepare.workers=1"]
NO_ROOM = {"RLIMIT_AS": 6 * 2**30}
_spec = importlib.util.find_spec("mltrain")  # where the installed mltrain lives (not imported here)
INSTALLED = Path(_spec.origin).resolve().parents[1] if _spec and _spec.origin else None
TIMEOUT_S = 120  # every case ends in seconds when handled; one still running by then is judged "wrong"
TIMED_OUT = -1000  # not a signal's status: a killed process (-9) is something else
ENTRY = {"mltrain": "train_main", "mltrain-prepare": "prepare_main", "mltrain-compare": "compare_main",
         "mltrain-sample": "sample_main", "mltrain-export": "export_main"}


# ---------------------------------------------------------------------------------------------
# running


def command(tool: str, args: list[str], limits: Optional[dict] = None, before: str = "") -> list[str]:
    """`python -c` running `tool` under `limits`, after the code `before` (unindented, may span lines)."""
    code = "\n".join([
        "import resource, sys",
        f"for name, value in {limits or {}!r}.items():",
        "    resource.setrlimit(getattr(resource, name), (value, value))",
        before,
        f"sys.argv = [{tool!r}, *sys.argv[1:]]",
        f"from {'mltrain.cli' if tool == 'mltrain' else 'mltrain.console'} import {ENTRY[tool]}",
        f"{ENTRY[tool]}()",
    ])
    return [sys.executable, "-c", code, *args]


@dataclass
class Env:
    tmp: Path
    env: dict
    src: Optional[Path] = None  # the tree measured (None: the installed mltrain)

    def run(self, tool: str, *args: str, cwd: Optional[Path] = None, limits: Optional[dict] = None,
            before: str = "", new_session: bool = False, env: Optional[dict] = None,
            timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(command(tool, list(args), limits, before), cwd=cwd or self.tmp,
                                  env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=timeout,
                                  start_new_session=new_session, errors="replace")
        except subprocess.TimeoutExpired as err:  # a run that goes on and on with a nonsense value: "wrong"
            text = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")  # noqa: E731
            return subprocess.CompletedProcess(err.cmd, TIMED_OUT, text(err.stdout), text(err.stderr) + "\n[timed out]")

    def start(self, tool: str, *args: str, cwd: Optional[Path] = None, env: Optional[dict] = None, before: str = "",
              stdout: Any = subprocess.PIPE, stderr: Any = subprocess.PIPE, new_session: bool = False) -> subprocess.Popen:
        return subprocess.Popen(command(tool, list(args), before=before), cwd=cwd or self.tmp,
                                env={**self.env, **(env or {})}, stdout=stdout, stderr=stderr, text=True,
                                errors="replace", start_new_session=new_session)


def finish(p: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = p.communicate(timeout=600)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def tree(path: Path) -> dict[str, bytes]:
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def rows(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({"torn": line})
    return out


def one_run_of_rows(path: Path) -> bool:
    """metrics.jsonl holds one run's rows: every line whole, each eval step once, FLOPs never decrease."""
    if not path.exists():
        return False
    r = rows(path)
    evals = [x["step"] for x in r if "val/loss" in x]
    flops = [x.get("flops", 0) for x in r]
    return all("torn" not in x for x in r) and evals == sorted(set(evals)) and flops == sorted(flops)


# ---------------------------------------------------------------------------------------------
# cases


@dataclass
class Case:
    cls: str
    name: str
    run: Callable[[Env], list[subprocess.CompletedProcess]]
    needle: str = ""  # what the one error line must say (the key, the path)
    expect: str = "refuse"  # refuse: one clear line | ok: success
    code: int = 2
    protect: str = ""  # a folder (relative to tmp) whose files must stay byte for byte as they were
    setup: Optional[Callable[[Path], None]] = None
    check: Optional[Callable[[Env, list], Optional[str]]] = None  # an outcome that overrides the rest
    notes: list = field(default_factory=list)
    round: int = 1  # 1: issue 11's classes; 2: issue 20's


def earlier_run(path: Path) -> None:
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text("seed: 7\n")
    (path / "cli.log").write_text("[earlier] started\n")
    (path / "metrics.jsonl").write_text('{"step": 0, "flops": 0.0, "val/loss": 5.5}\n')


def read_only(tmp: Path) -> Path:
    if os.geteuid() != 0:
        d = tmp / "read_only"
        d.mkdir(exist_ok=True)
        d.chmod(0o555)
        return d
    return Path("/sys")  # root ignores permission bits; sysfs refuses even root


def blocker(tmp: Path) -> Path:
    f = tmp / "a_file"
    f.write_text("not a folder\n")
    return f


def cli_case(cls: str, name: str, *args: str, needle: str = "", limits: Optional[dict] = None, **kw) -> Case:
    def run(e: Env) -> list:
        resolved = [a.replace("{tmp}", str(e.tmp)).replace("{ro}", str(read_only(e.tmp)))
                    .replace("{file}", str(blocker(e.tmp)) if "{file}" in a else "") for a in args]
        return [e.run("mltrain", *resolved, limits=limits)]

    return Case(cls, name, run, needle=needle, **kw)


def two_at_once(e: Env, *args: str) -> list:
    procs = [e.start("mltrain", *SMOKE, *args) for _ in range(2)]
    return [finish(p) for p in procs]


def same_dir_check(e: Env, procs: list) -> Optional[str]:
    """Either start may win the race: the other must be refused with one line, whichever it is."""
    codes = sorted(p.returncode for p in procs)
    mixed = not one_run_of_rows(e.tmp / "run" / "metrics.jsonl")
    if mixed or codes == [0, 0]:
        return "lost"
    refused = [p for p in procs if p.returncode != 0]
    if codes == [0, 2] and len(error_lines(refused[0].stderr)) == 1:
        return "good"
    return "unclear"


def default_dirs_check(e: Env, procs: list) -> Optional[str]:
    metrics = list((e.tmp / "outputs").rglob("metrics.jsonl"))
    if any(not one_run_of_rows(m) for m in metrics):
        return "lost"
    if [p.returncode for p in procs] != [0, 0] or len(metrics) != 2:
        return "wrong"
    return None


def live_run_started(path: str) -> Callable[[Path], None]:
    """What a live run that has not written its first row yet leaves in its folder."""
    def setup(tmp: Path) -> None:
        (tmp / path).mkdir(parents=True)
        (tmp / path / "cli.log").write_text("the live run's log\n")
        (tmp / path / ".mltrain.lock").write_text("")
    return setup


def live_lock(path: Path) -> Callable[[Env], list]:
    """Run mltrain into `path` while another process holds the run's lock, as a live run would."""
    def run(e: Env) -> list:
        target = e.tmp / path
        with open(target / ".mltrain.lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            key = "hydra.sweep.dir" if "sweep" in str(path) else "hydra.run.dir"
            extra = ["-m", "seed=0"] if key == "hydra.sweep.dir" else []
            return [e.run("mltrain", *extra, *SMOKE, f"{key}={target}")]
    return run


def runs_in_the_next_minutes(tmp: Path) -> None:
    """Earlier runs in every default dir name of the next 90 s: as if started in the same second."""
    now = datetime.now()
    for s in range(90):
        t = now + timedelta(seconds=s)
        earlier_run(tmp / "outputs" / t.strftime("%Y-%m-%d") / t.strftime("%H-%M-%S"))


EARLIER = {".hydra/config.yaml": b"seed: 7\n", "cli.log": b"[earlier] started\n",
           "metrics.jsonl": b'{"step": 0, "flops": 0.0, "val/loss": 5.5}\n'}


def new_run_beside(e: Env, procs: list) -> Optional[str]:
    """The earlier runs are as they were, and the new one ran in a folder of its own."""
    dirs = [d for d in (e.tmp / "outputs").glob("*/*") if d.is_dir()]
    earlier = [d for d in dirs if (d / "cli.log").exists() and (d / "cli.log").read_bytes() == EARLIER["cli.log"]]
    if any(tree(d) != EARLIER for d in earlier) or len(earlier) != 90:
        return "lost"
    return None if procs[-1].returncode == 0 and len(dirs) == 91 else "wrong"


def killed_sweep(tmp: Path) -> None:
    earlier_run(tmp / "sweep" / "scale=smoke,seed=0")
    (tmp / "sweep" / "multirun.yaml").write_text("hydra: {}\n")


def stale_lock(tmp: Path) -> None:
    (tmp / "run").mkdir()
    (tmp / "run" / ".mltrain.lock").write_text("999999\n")


def jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def prepare_case(name: str, lines: Callable[[], list[str]], *extra: str, needle: str = "", code: int = 2,
                 limits: Optional[dict] = None, before: str = "", new_session: bool = False, expect: str = "refuse") -> Case:
    def run(e: Env) -> list:
        data = jsonl(e.tmp / "docs.jsonl", lines())
        args = [f"prepare.data_files={data}", f"prepare.out_dir={e.tmp / 'out'}", f"prepare.cache_dir={e.tmp / 'hf'}",
                *PREPARE, *[a.replace("{file}", str(blocker(e.tmp)) if "{file}" in a else "") for a in extra]]
        return [e.run("mltrain-prepare", *args, limits=limits, before=before, new_session=new_session)]

    return Case("ordinary trouble" if not limits else "full disk", name, run, needle=needle, code=code, expect=expect)


def docs(n: int = 100) -> Callable[[], list[str]]:
    return lambda: [json.dumps({"text": f"document {i} " * 40}) for i in range(n)]


CTRL_C = textwrap.dedent("""
    import os, signal
    from mltrain.data import prepare
    def _ctrl_c(path):
        if "_train_" in path.name:
            os.killpg(os.getpgid(0), signal.SIGINT)
    prepare._after_shard = _ctrl_c
""")


def fake_runs(tmp: Path) -> None:
    import math

    for name, kind, label, k in (("a", "single", "default", 1.0), ("b", "multilevel", "coarsening=evenodd", 1.3)):
        d = tmp / "runs" / name
        d.mkdir(parents=True)
        r = [{"step": i, "flops": i * 1e9, "train/loss": 5.0 - k * math.log(i), "level": 0} for i in range(1, 50)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in r))
        (d / "summary.json").write_text(json.dumps({"run_kind": kind, "label": label, "seed": 0, "total_flops": 49e9}))


def compare_case(name: str, out: str) -> Case:
    def run(e: Env) -> list:
        target = out.replace("{file}", str(blocker(e.tmp)) if "{file}" in out else "").replace("{ro}", str(read_only(e.tmp)))
        return [e.run("mltrain-compare", str(e.tmp / "runs"), "--out", target)]

    return Case("ordinary trouble", name, run, needle="report", setup=fake_runs, protect="runs")


def binary_file(kind: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        import numpy as np

        rng = np.random.default_rng(0)
        if kind == "random":
            (tmp / "data.txt").write_bytes(rng.integers(0, 256, 50_000, dtype=np.uint8).tobytes())
        else:  # an llm.c token shard: uint16 ids below 256, so every other byte is NUL (valid UTF-8)
            header = np.zeros(256, dtype="<i4")
            header[:3] = 20240520, 1, 25_000
            (tmp / "data.txt").write_bytes(header.tobytes() + rng.integers(32, 127, 25_000).astype("<u2").tobytes())
    return setup


def shards_without_val(tmp: Path) -> None:
    import numpy as np

    (tmp / "shards").mkdir()
    for name in ("b.bin", "a.bin", "c.bin"):
        header = np.zeros(256, dtype="<i4")
        header[:3] = 20240520, 1, 5000
        (tmp / "shards" / name).write_bytes(header.tobytes() + (np.arange(5000) % 256).astype("<u2").tobytes())


def says_which_val_shard(e: Env, procs: list) -> Optional[str]:
    p = procs[-1]
    if p.returncode != 0:
        return "unclear"
    return None if "a.bin" in p.stderr and "validation" in p.stderr else "wrong"


def warm_cache(e: Env) -> None:
    e.run("mltrain", *SMOKE, "train.max_steps=1", f"hydra.run.dir={e.tmp / 'warm'}")


def full_disk_run(e: Env) -> list:
    warm_cache(e)
    return [e.run("mltrain", *TINY, "train.max_steps=200", "train.log_interval=1", "train.eval_interval=50",
                  f"hydra.run.dir={e.tmp / 'run'}", limits={"RLIMIT_FSIZE": 12_000})]


def full_disk_end(e: Env) -> list:
    warm_cache(e)
    return [e.run("mltrain", *SMOKE, f"hydra.run.dir={e.tmp / 'run'}", limits={"RLIMIT_FSIZE": 50_000})]


def full_disk_check(e: Env, procs: list) -> Optional[str]:
    m = e.tmp / "run" / "metrics.jsonl"
    if m.exists() and (not m.read_bytes().endswith(b"\n") or not one_run_of_rows(m)):
        return "lost"
    return None


def cache_full_check(e: Env, procs: list) -> Optional[str]:
    cache = e.tmp / "cache"
    return "lost" if cache.exists() and [p for p in cache.rglob("*") if p.is_file()] else None


def mixing(c: list) -> None:
    """Runs that mix."""
    mix = "runs that mix"
    c.append(Case(mix, "same hydra.run.dir, two starts at once", lambda e: two_at_once(e, f"hydra.run.dir={e.tmp / 'run'}"),
                  check=same_dir_check))
    c.append(Case(mix, "hydra.run.dir of a live run (lock held, no row yet)", live_lock(Path("run")), needle="in use",
                  setup=live_run_started("run"), protect="run"))
    c.append(Case(mix, "two default-dir runs started at once", lambda e: two_at_once(e), expect="ok",
                  check=default_dirs_check))
    c.append(Case(mix, "default dir taken by a run of the same second", lambda e: [e.run("mltrain", *SMOKE)],
                  expect="ok", setup=runs_in_the_next_minutes, check=new_run_beside))
    c.append(Case(mix, "re-run a sweep over its killed jobs", lambda e: [e.run(
        "mltrain", "-m", *SMOKE, "seed=0,1", f"hydra.sweep.dir={e.tmp / 'sweep'}")], needle="sweep",
        setup=killed_sweep, protect="sweep"))
    c.append(Case(mix, "hydra.sweep.dir of a live sweep (lock held)", live_lock(Path("sweep")), needle="in use",
                  setup=live_run_started("sweep"), protect="sweep"))
    c.append(Case(mix, "lock file left by a killed run", lambda e: [e.run("mltrain", *SMOKE, f"hydra.run.dir={e.tmp / 'run'}")],
                  expect="ok", setup=stale_lock))


def vanishing_keys(c: list) -> None:
    """Keys that vanish."""
    for o, key in (("+train.max_step=3", "train.max_step"), ("++train.max_step=3", "train.max_step"), ("+foo=1", "foo"),
                   ("+model.n_layers=2", "model.n_layers"), ("+multilevel.coarse_optim.lr_min=0.1", "lr_min"),
                   ("+data.paths=x.txt", "data.paths"), ("+train.eval_every=5", "train.eval_every")):
        c.append(cli_case("keys that vanish", o, *SMOKE, o, "hydra.run.dir={tmp}/run", needle=key))


def slipping_values(c: list) -> None:
    """Values that slip through."""
    for args, key in ((["optim.lr=inf"], "optim.lr"), (["optim.lr=nan"], "optim.lr"), (["optim.weight_decay=nan"], "optim.weight_decay"),
                      (["train.grad_clip=nan"], "train.grad_clip"), (["train.grad_clip=inf"], "train.grad_clip"),
                      (["optim=adamw", "optim.eps=nan"], "optim.eps"), (["optim=adamw", "optim.eps=0"], "optim.eps"),
                      (["optim=adamw", "optim.eps=-1"], "optim.eps"), (["schedule.min_lr=nan"], "schedule.min_lr"),
                      (["coarsening=evenodd", "multilevel.coarse_optim.lr=nan"], "multilevel.coarse_optim.lr"),
                      (["coarsening=evenodd", "multilevel.coarse_optim.eps=0"], "multilevel.coarse_optim.eps"),
                      (["model.dropout=nan"], "model.dropout"), (["coarsening=evenodd", "multilevel.delta=nan"], "multilevel.delta"),
                      (["data.val_fraction=inf"], "data.val_fraction"), (["optim.betas=[0.9,nan]"], "optim.betas"),
                      (["optim.momentum=inf"], "optim.momentum"), (["train.max_steps=100000000000000000000"], "train.max_steps"),
                      (["model.vocab_size=0"], "model.vocab_size"), (["seed=-1"], "seed")):
        c.append(cli_case("values that slip through", " ".join(args), *SMOKE, *args, "hydra.run.dir={tmp}/run", needle=f"{key}="))


def ordinary_trouble(c: list) -> None:
    """Tracebacks for ordinary trouble."""
    t = "ordinary trouble"
    c.append(cli_case(t, "hydra.run.dir below a file", *SMOKE, "hydra.run.dir={file}/run", needle="a_file"))
    c.append(cli_case(t, "hydra.run.dir read-only", *SMOKE, "hydra.run.dir={ro}/run", needle="run"))
    c.append(Case(t, "working dir read-only (default run dir)", lambda e: [e.run("mltrain", *SMOKE, cwd=read_only(e.tmp))],
                  needle="outputs"))
    c.append(cli_case(t, "data.cache_dir below a file", *SMOKE, "data.cache_dir={file}/cache", "hydra.run.dir={tmp}/run",
                      needle="cache"))
    c.append(cli_case(t, "data.path missing", *SMOKE, "data=text", "data.path={tmp}/none.txt", "hydra.run.dir={tmp}/run",
                      needle="none.txt"))
    c.append(prepare_case("prepare: malformed JSONL line", lambda: [json.dumps({"text": "good " * 50})] * 20 + ['{"text": "broken'],
                          needle="docs.jsonl"))
    c.append(prepare_case("prepare: JSONL without the text field", lambda: [json.dumps({"body": "x " * 50})] * 20,
                          needle="text_field"))
    c.append(prepare_case("prepare: Ctrl-C (exit 130, one line)", docs(200), "prepare.workers=2", needle="shard", code=130,
                          before=CTRL_C, new_session=True))
    c.append(prepare_case("prepare: out_dir below a file", docs(), "prepare.out_dir={file}/out", needle="a_file"))
    c.append(Case(t, "prepare: error goes to stderr", lambda e: [e.run(
        "mltrain-prepare", f"prepare.data_files={e.tmp / 'none.jsonl'}", f"prepare.out_dir={e.tmp / 'o'}", *PREPARE)],
        needle="none.jsonl"))
    c.append(compare_case("compare --out below a file", "{file}/report"))
    c.append(compare_case("compare --out read-only", "{ro}/report"))


def full_disk(c: list) -> None:
    """Full disk."""
    d = "full disk"
    c.append(Case(d, "metrics.jsonl at the file-size limit", full_disk_run, needle="metrics.jsonl", check=full_disk_check))
    c.append(Case(d, "final checkpoint and weights at the file-size limit", full_disk_end, needle="checkpoint", check=full_disk_check))
    c.append(Case(d, "token cache at the file-size limit", lambda e: [e.run(
        "mltrain", *SMOKE, f"data.cache_dir={e.tmp / 'cache'}", f"hydra.run.dir={e.tmp / 'run'}",
        limits={"RLIMIT_FSIZE": 100_000})], needle="cache", check=cache_full_check))
    c.append(prepare_case("prepare: shards at the file-size limit", docs(), "prepare.shard_tokens=20000",
                          limits={"RLIMIT_FSIZE": 30_000}, needle="shard"))


def not_text(c: list) -> None:
    """Data that is not text."""
    x = "data that is not text"
    c.append(Case(x, "data.path: random bytes", lambda e: [e.run("mltrain", *SMOKE, "data=text", f"data.path={e.tmp / 'data.txt'}",
                                                                  f"hydra.run.dir={e.tmp / 'run'}")],
                  needle="data.txt", setup=binary_file("random")))
    c.append(Case(x, "data.path: a token shard", lambda e: [e.run("mltrain", *SMOKE, "data=text", f"data.path={e.tmp / 'data.txt'}",
                                                                   f"hydra.run.dir={e.tmp / 'run'}")],
                  needle="data.txt", setup=binary_file("shard")))
    c.append(Case(x, "shard folder without a validation shard", lambda e: [e.run(
        "mltrain", *SMOKE, "data=shards", f"data.dir={e.tmp / 'shards'}", "data.tokenizer=bytes", f"hydra.run.dir={e.tmp / 'run'}")],
        expect="ok", setup=shards_without_val, check=says_which_val_shard))


def expensive_first(c: list) -> None:
    """Expensive before cheap."""
    o = "expensive before cheap"
    c.append(cli_case(o, "model.block_size=100000000 (data too short)", *SMOKE, "model.block_size=100000000",
                      "hydra.run.dir={tmp}/run", needle="block_size", limits=NO_ROOM))
    c.append(cli_case(o, "a 206B-parameter model", *SMOKE, "model.n_layer=64", "model.n_embd=16384", "model.n_head=16",
                      "hydra.run.dir={tmp}/run", needle="parameters", limits=NO_ROOM))
    c.append(cli_case(o, "train.batch_size=20000000", *SMOKE, "train.batch_size=20000000", "hydra.run.dir={tmp}/run",
                      needle="batch", limits=NO_ROOM))
    c.append(cli_case(o, "model.vocab_size=10000000000", *SMOKE, "model.vocab_size=10000000000", "hydra.run.dir={tmp}/run",
                      needle="parameters", limits=NO_ROOM))


def cases() -> list[Case]:
    """Round one's cases (issue 11)."""
    c: list[Case] = []
    for add in (mixing, vanishing_keys, slipping_values, ordinary_trouble, full_disk, not_text, expensive_first):
        add(c)
    return c


# ---------------------------------------------------------------------------------------------
# Round two (issue 20): the cases. Each class has cases beyond the examples.

R2 = dict(round=2)
VICTIM = b"a file outside the run: nobody's to change\n"
STOP_AFTER_FIRST_CHECKPOINT = textwrap.dedent("""
    import os, signal
    from mltrain.training import checkpoint as _ckpt
    _save = _ckpt.CheckpointFolder.save
    def _save_then_ctrl_c(self, *a, **k):
        path = _save(self, *a, **k)
        os.kill(os.getpid(), signal.SIGINT)  # as if Ctrl-C came right after the first checkpoint
        return path
    _ckpt.CheckpointFolder.save = _save_then_ctrl_c
""")
NAN_LOSS = textwrap.dedent("""
    import torch
    from mltrain import model as _model
    _forward = _model.GPT.forward
    def _nan_forward(self, *a, **k):
        logits, loss = _forward(self, *a, **k)
        return logits, (loss * float("nan") if loss is not None else loss)
    _model.GPT.forward = _nan_forward
""")
CKPT = ["train.checkpoint_interval=2", "train.keep_checkpoints=3"]


def victim(tmp: Path) -> Path:
    """tmp/outside/victim.txt: a file outside every run (20 kB, so a cut shows), made once."""
    (tmp / "outside").mkdir(exist_ok=True)
    path = tmp / "outside" / "victim.txt"
    if not path.exists():
        path.write_bytes(VICTIM * 500)
    return path


def run_into(e: Env, name: str, *extra: str, before: str = "", env: Optional[dict] = None) -> subprocess.CompletedProcess:
    return e.run("mltrain", *SMOKE, *extra, f"hydra.run.dir={e.tmp / name}", before=before, env=env)


def unfinished(e: Env, name: str = "run", *extra: str) -> Path:
    """A run that stopped before its end, as a SIGKILL leaves it: checkpoints, rows, no summary or weights."""
    run_into(e, name, *CKPT, *extra)
    d = e.tmp / name
    for f in ("summary.json", "model.json", "model.safetensors"):
        (d / f).unlink(missing_ok=True)
    return d


def resume(e: Env, name: str = "run", *extra: str, **kw) -> subprocess.CompletedProcess:
    return run_into(e, name, *CKPT, *extra, "train.resume=true", **kw)


def checkpoints_of(d: Path) -> list[Path]:
    return sorted((d / "checkpoints").glob("step-*.pt"))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leftovers(marker: str) -> list[int]:
    """Processes (other than this one) whose environment holds `marker`: started by the case, still alive."""
    found = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() in (d / "environ").read_bytes() and int(d.name) != os.getpid():
                found.append(int(d.name))
        except OSError:
            continue
    return found


def link_case(name: str, place: Callable[[Path], None], run: Callable[[Env], list], needle: str = "symbolic link") -> Case:
    return Case("writes through links", name, run, needle=needle, setup=with_victim(place), protect="outside", **R2)


def planted(path: str, target: Callable[[Path], Path] = victim) -> Callable[[Path], None]:
    def place(tmp: Path) -> None:
        link = tmp / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target(tmp))
    return place


def metrics_linked(e: Env) -> list:
    d = unfinished(e)
    (d / "metrics.jsonl").unlink()
    (d / "metrics.jsonl").symlink_to(e.tmp / "outside" / "victim.txt")
    return [resume(e)]


def cache_linked(e: Env) -> list:
    (e.tmp / "cache").mkdir()
    (e.tmp / "cache" / "tokens").symlink_to(e.tmp / "outside")
    return [run_into(e, "run", f"data.cache_dir={e.tmp / 'cache'}", "data=text", f"data.path={e.tmp / 'notes.txt'}")]


def compare_linked(e: Env) -> list:
    (e.tmp / "report").mkdir()
    (e.tmp / "report" / "comparison.md").symlink_to(e.tmp / "outside" / "victim.txt")
    return [e.run("mltrain-compare", str(e.tmp / "runs"), "--out", str(e.tmp / "report"))]


def with_victim(*more: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        victim(tmp)
        for f in more:
            f(tmp)
    return setup


def links(c: list) -> None:
    c.append(link_case("lock file a link to a file outside", planted("run/.mltrain.lock"),
                       lambda e: [run_into(e, "run")]))
    c.append(Case("writes through links", "resume: metrics.jsonl a link outside", metrics_linked, needle="metrics.jsonl",
                  setup=with_victim(), protect="outside", **R2))
    c.append(link_case(".hydra/config.yaml a link (fresh run dir)", planted("run/.hydra/config.yaml"),
                       lambda e: [run_into(e, "run")]))
    c.append(link_case("cli.log a link (fresh run dir)", planted("run/cli.log"), lambda e: [run_into(e, "run")]))
    c.append(Case("writes through links", "token cache folder a link outside", cache_linked, needle="tokens",
                  setup=with_victim(lambda tmp: (tmp / "notes.txt").write_text("some text to train on\n" * 3000)),
                  protect="outside", **R2))
    c.append(Case("writes through links", "compare: comparison.md a link outside", compare_linked, needle="comparison.md",
                  setup=with_victim(fake_runs), protect="outside", **R2))


def foreign_checkpoint(e: Env) -> list:
    d = unfinished(e, "run")
    other = unfinished(e, "other", "seed=1")
    newest = checkpoints_of(other)[-1]
    shutil.copy2(newest, d / "checkpoints" / "step-000099-00000099.pt")  # another run's, newest here
    before = tree(d)
    proc = resume(e)
    return [proc, _unchanged(d, before, proc)]


def _unchanged(d: Path, before: dict, proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """A marker process: its return code says whether the run dir is as it was (0) or changed (1); the
    lock file (the pid of whoever holds the dir now) is no output."""
    same = {k: v for k, v in tree(d).items() if k != ".mltrain.lock"} == {k: v for k, v in before.items()
                                                                           if k != ".mltrain.lock"}
    return subprocess.CompletedProcess([], 0 if same else 1, "", "")


def refused_and_unchanged(e: Env, procs: list) -> Optional[str]:
    proc, marker = procs
    if proc.returncode == 0:
        return "wrong"
    if marker.returncode:
        return "lost"
    procs[:] = [proc]
    return None


def no_hydra(keep_checkpoints: bool) -> Callable[[Env], list]:
    def run(e: Env) -> list:
        d = unfinished(e)
        shutil.rmtree(d / ".hydra")
        if not keep_checkpoints:
            shutil.rmtree(d / "checkpoints")
        before = tree(d)
        proc = resume(e, "run", "optim.lr=0.5")
        return [proc, _unchanged(d, before, proc)]
    return run


def damaged_newest(e: Env) -> list:
    d = unfinished(e)
    checkpoints_of(d)[-1].write_bytes(b"")
    return [resume(e)]


def fell_back(e: Env, procs: list) -> Optional[str]:
    p = procs[-1]
    if p.returncode != 0:
        return "unclear"
    summary = json.loads((e.tmp / "run" / "summary.json").read_text())
    named = any("step-" in line and "warning" in line.lower() for line in p.stderr.splitlines())
    return "good" if summary.get("status") == "finished" and named else "unclear"


def summary_damaged(content: bytes) -> Callable[[Env], list]:
    def run(e: Env) -> list:
        d = unfinished(e)
        (d / "summary.json").write_bytes(content)
        before = tree(d)
        proc = resume(e)
        return [proc, _unchanged(d, before, proc)]
    return run


CRAFT = textwrap.dedent("""
    import sys, torch
    path = sys.argv[1]
    payload = torch.load(path, weights_only=True)
    del payload["runner"]["fine_optimizer"]
    torch.save(payload, path)
""")


def crafted_checkpoint(e: Env) -> list:
    d = unfinished(e)
    for extra in checkpoints_of(d)[:-1]:
        extra.unlink()
    subprocess.run([sys.executable, "-c", CRAFT, str(checkpoints_of(d)[-1])], env=e.env, check=True)
    before = tree(d)
    proc = resume(e)
    return [proc, _unchanged(d, before, proc)]


def metrics_shifted(e: Env) -> list:
    d = unfinished(e)
    data = (d / "metrics.jsonl").read_bytes()
    (d / "metrics.jsonl").write_bytes(b'{"step": 0, "note": "a row added by hand"}\n' + data)
    before = tree(d)
    proc = resume(e)
    return [proc, _unchanged(d, before, proc)]


def foreign(c: list) -> None:
    f = "foreign or damaged state"
    c.append(Case(f, "resume: newest checkpoint from another run (seed)", foreign_checkpoint, needle="another run",
                  check=refused_and_unchanged, **R2))
    c.append(Case(f, "resume: no .hydra/, checkpoints, another lr", no_hydra(True), needle=".hydra",
                  check=refused_and_unchanged, **R2))
    c.append(Case(f, "resume: no .hydra/, no checkpoint", no_hydra(False), needle=".hydra",
                  check=refused_and_unchanged, **R2))
    c.append(Case(f, "resume: newest checkpoint empty (older good)", damaged_newest, expect="ok", check=fell_back, **R2))
    c.append(Case(f, "resume: summary.json cut", summary_damaged(b'{"status": "fin'), needle="summary.json",
                  check=refused_and_unchanged, **R2))
    c.append(Case(f, "resume: summary.json a list", summary_damaged(b'["finished"]'), needle="summary.json",
                  check=refused_and_unchanged, **R2))
    c.append(Case(f, "resume: only checkpoint lacks the optimizer", crafted_checkpoint, needle="checkpoint",
                  check=refused_and_unchanged, **R2))
    c.append(Case(f, "resume: metrics.jsonl edited (cut not at a row)", metrics_shifted, needle="metrics.jsonl",
                  check=refused_and_unchanged, **R2))


def sweep_sharing(*points: str) -> Callable[[Env], list]:
    def run(e: Env) -> list:
        return [e.run("mltrain", "-m", *SMOKE, *points, f"hydra.sweep.dir={e.tmp / 'sweep'}")]
    return run


def records_kept(e: Env, procs: list) -> Optional[str]:
    """Refused before anything was written; else lost when one job dir holds two points' records."""
    sweep = e.tmp / "sweep"
    jobs = [d for d in sweep.glob("*") if d.is_dir()] if sweep.exists() else []
    if procs[-1].returncode != 0 and not any((d / ".hydra").exists() for d in jobs):
        return None  # judged on its line
    return "lost" if jobs and any((d / ".hydra").exists() for d in jobs) else "wrong"


def stale_weights(e: Env) -> list:
    first = run_into(e, "run", "train.checkpoint_interval=2", before=STOP_AFTER_FIRST_CHECKPOINT)
    second = run_into(e, "run", "train.checkpoint_interval=2", "train.resume=true", before=NAN_LOSS)
    sample = e.run("mltrain-sample", str(e.tmp / "run"), "--max-new-tokens", "5")
    return [first, second, sample]


def stale_weights_check(e: Env, procs: list) -> Optional[str]:
    first, second, sample = procs
    if first.returncode != 130 or second.returncode != 1:
        return "unclear"
    procs[:] = [sample]
    return "wrong" if sample.returncode == 0 or (e.tmp / "run" / "model.safetensors").exists() else None


def identical_runs(e: Env) -> list:
    return [run_into(e, f"run{i}") for i in range(3)]


def identical_check(e: Env, procs: list) -> Optional[str]:
    files = [(e.tmp / f"run{i}" / "model.safetensors").read_bytes() for i in range(3) if procs[i].returncode == 0]
    return None if len(files) == 3 and files[0] == files[1] == files[2] else "wrong"


def records(c: list) -> None:
    r = "records overwritten"
    c.append(Case(r, "sweep train.progress=true,false (left out of dir names)",
                  sweep_sharing("train.progress=true,false"), needle="share", check=records_kept, **R2))
    c.append(Case(r, "sweep train.checkpoint_interval=5,6", sweep_sharing("train.checkpoint_interval=5,6"),
                  needle="share", check=records_kept, **R2))
    c.append(Case(r, "sweep seed=1,1 (one point twice)", sweep_sharing("seed=1,1"), needle="share",
                  check=records_kept, **R2))
    c.append(Case(r, "diverged after a resume: sample uses stale weights", stale_weights, needle="diverged",
                  check=stale_weights_check, **R2))
    c.append(Case(r, "three identical runs: byte-identical weights", identical_runs, expect="ok",
                  check=identical_check, **R2))


def sweep_jobs(n_jobs: str) -> Callable[[Env], list]:
    def run(e: Env) -> list:
        return [e.run("mltrain", "-m", *SMOKE, "hydra/launcher=local", f"hydra.launcher.n_jobs={n_jobs}", "seed=0,1",
                      f"hydra.sweep.dir={e.tmp / 'sweep'}")]
    return run


def sweep_not_blocked(e: Env, procs: list) -> Optional[str]:
    """A value accepted, or a sweep dir left blocked for the next try (it holds multirun.yaml): wrong."""
    return "wrong" if procs[-1].returncode == 0 or (e.tmp / "sweep" / "multirun.yaml").exists() else None


def killed_sweep_workers(e: Env) -> list:
    sweep = e.tmp / "sweep"
    p = e.start("mltrain", "-m", *SMOKE, "train.max_steps=100000", "train.eval_interval=1000", "hydra/launcher=local",
                "hydra.launcher.n_jobs=2", "seed=0,1", f"hydra.sweep.dir={sweep}", stdout=subprocess.DEVNULL,
                stderr=open(e.tmp / "sweep.err", "w"))
    deadline = time.monotonic() + 90
    while len(list(sweep.glob("*/metrics.jsonl"))) < 2 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
    p.kill()  # SIGKILL: the sweep's main process dies without a word
    p.wait()
    marker = e.env["MLTRAIN_FAULT_CASE"]
    deadline = time.monotonic() + 20
    while leftovers(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    alive = leftovers(marker)
    return [subprocess.CompletedProcess(p.args, 0 if not alive else 1, "", f"{len(alive)} worker(s) alive 20 s "
                                        "after the sweep was killed" if alive else "")]


def tool_on_edited_model(tool: str, fields: dict, *args: str) -> Callable[[Env], list]:
    def run(e: Env) -> list:
        run_into(e, "run")
        info_path = e.tmp / "run" / "model.json"
        info = json.loads(info_path.read_text())
        info["model"].update(fields)
        info_path.write_text(json.dumps(info))
        extra = [str(e.tmp / "out")] if tool == "mltrain-export" else ["--max-new-tokens", "5"]
        return [e.run(tool, str(e.tmp / "run"), *extra, *args, limits=NO_ROOM)]
    return run


def sample_streams_flat(e: Env) -> list:
    run_into(e, "run")
    p = e.start("mltrain-sample", str(e.tmp / "run"), "--max-new-tokens", "1000000000000", new_session=True)
    got, rss = _read_while(p, lambda got, rss: len(rss) >= 8, 30)
    done = ctrl_c(p)
    done.stdout = ""  # the text is the tool's output, not a message
    grew = rss and max(rss) - min(rss) > 50_000
    done.stderr += f"\n[streamed {len(got)} chars before Ctrl-C; RSS {min(rss or [0])}..{max(rss or [0])} kB]"
    return [done, bool(got) and not grew]


def ctrl_c(p: subprocess.Popen) -> subprocess.CompletedProcess:
    """Press Ctrl-C in `p` and give it 30 s to end (then it is killed and counted as hung)."""
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=30)
        return subprocess.CompletedProcess(p.args, p.returncode, out or "", err or "")
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return subprocess.CompletedProcess(p.args, TIMED_OUT, out or "", (err or "") + "\n[timed out]")


def _read_while(p: subprocess.Popen, enough: Callable[[str, list], bool], seconds: float) -> tuple[str, list]:
    """What `p` writes to stdout (read without blocking) and its RSS every half second once it writes,
    until `enough(text, rss)`, `p` ends or `seconds` pass."""
    os.set_blocking(p.stdout.fileno(), False)
    got, rss = b"", []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and p.poll() is None and not enough(got.decode(errors="replace"), rss):
        time.sleep(0.5)
        try:
            got += os.read(p.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            pass
        if got:
            rss.append(_rss_kb(p.pid))
    os.set_blocking(p.stdout.fileno(), True)
    return got.decode(errors="replace"), rss


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def streamed(e: Env, procs: list) -> Optional[str]:
    proc, ok = procs
    procs[:] = [proc]
    return None if ok else "wrong"


def resources(c: list) -> None:
    u = "unbounded resources"
    many = str(4 * (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))
    c.append(Case(u, "hydra.launcher.n_jobs=0", sweep_jobs("0"), needle="n_jobs", check=sweep_not_blocked, **R2))
    c.append(Case(u, "hydra.launcher.n_jobs=-3", sweep_jobs("-3"), needle="n_jobs", check=sweep_not_blocked, **R2))
    c.append(Case(u, f"hydra.launcher.n_jobs={many} (4x the CPUs)", sweep_jobs(many), needle="n_jobs",
                  check=sweep_not_blocked, **R2))
    c.append(Case(u, "sweep killed (SIGKILL): its workers end", killed_sweep_workers, expect="ok", **R2))
    c.append(Case(u, "sample: model.json n_embd=1000000 (TBs)", tool_on_edited_model("mltrain-sample", {"n_embd": 1000000}),
                  needle="model.json", **R2))
    c.append(Case(u, "export: model.json n_layer=1000000000", tool_on_edited_model("mltrain-export", {"n_layer": 10**9}),
                  needle="model.json", **R2))
    c.append(Case(u, "export: model.json n_head does not divide n_embd", tool_on_edited_model("mltrain-export", {"n_head": 3}),
                  needle="n_head", **R2))
    c.append(Case(u, "sample: model.json block_size=-4", tool_on_edited_model("mltrain-sample", {"block_size": -4}),
                  needle="block_size", **R2))
    c.append(Case(u, "sample --max-new-tokens 1e12: streams, flat memory, Ctrl-C", sample_streams_flat, code=130,
                  check=streamed, **R2))


def ranks(e: Env, n: int, *extra: str, env: Optional[dict] = None) -> list[subprocess.Popen]:
    """`n` ranks of one job started by hand (what torchrun would set), each one's stderr in a file."""
    port = str(free_port())
    procs = []
    for r in range(n):
        err = e.tmp / f"rank{r}.err"
        p = e.start("mltrain", *SMOKE, "device=cpu", *extra, f"hydra.run.dir={e.tmp / 'run'}", stdout=subprocess.DEVNULL,
                    stderr=open(err, "w"), env={"WORLD_SIZE": str(n), "RANK": str(r), "LOCAL_RANK": str(r),
                                                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, **(env or {})})
        p.err_path = err  # type: ignore[attr-defined]
        procs.append(p)
    return procs


def finished_all(procs: list[subprocess.Popen], timeout: float = 120) -> list:
    out = []
    for p in procs:
        try:
            p.wait(timeout=timeout)
            code = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            code = TIMED_OUT
        out.append(subprocess.CompletedProcess(p.args, code, "", Path(p.err_path).read_text(errors="replace")))
    return out


def together(procs: list) -> list:
    """The ranks' outputs judged as one console: the worst status, every stderr line."""
    code = TIMED_OUT if any(p.returncode == TIMED_OUT for p in procs) else max(p.returncode for p in procs)
    return [subprocess.CompletedProcess([], code, "", "".join(p.stderr for p in procs))]


def alone_rank(**env: str) -> Callable[[Env], list]:
    def run(e: Env) -> list:
        values = {k: v.replace("{port}", str(free_port())) for k, v in env.items()}
        return [e.run("mltrain", *SMOKE, "device=cpu", f"hydra.run.dir={e.tmp / 'run'}", timeout=60,
                      env={"MLTRAIN_RENDEZVOUS_TIMEOUT_S": "5", **values})]
    return run


def rank_killed(e: Env) -> list:
    procs = ranks(e, 2, "train.max_steps=100000", "train.eval_interval=1000")
    deadline = time.monotonic() + 90
    metrics = e.tmp / "run" / "metrics.jsonl"
    while time.monotonic() < deadline and all(p.poll() is None for p in procs) and \
            (not metrics.exists() or metrics.read_bytes().count(b"\n") < 3):
        time.sleep(0.2)
    procs[1].kill()
    return together(finished_all(procs, timeout=60))


def distributed_cases(c: list) -> None:
    d = "distributed faults"
    c.append(Case(d, "RANK/WORLD_SIZE/MASTER_* set, no other rank", alone_rank(
        WORLD_SIZE="2", RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="{port}"), needle="rank", **R2))
    c.append(Case(d, "rank 1 alone (rank 0 never starts)", alone_rank(
        WORLD_SIZE="2", RANK="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="{port}"), needle="rank", **R2))
    c.append(Case(d, "RANK/WORLD_SIZE without MASTER_ADDR", alone_rank(WORLD_SIZE="2", RANK="0"),
                  needle="MASTER_ADDR", **R2))
    c.append(Case(d, "RANK=3 with WORLD_SIZE=2", alone_rank(WORLD_SIZE="2", RANK="3"), needle="RANK", **R2))
    c.append(Case(d, "batch 3 over 2 ranks: the error once", lambda e: together(finished_all(ranks(
        e, 2, "train.batch_size=3"))), needle="divisible", **R2))
    c.append(Case(d, "a rank killed mid-run: the other, one line", rank_killed, needle="lost contact", **R2))


def interrupted_then(command: Callable[[Env, str], subprocess.CompletedProcess], run_dir: str,
                     *extra: str) -> Callable[[Env], list]:
    """A run stopped by Ctrl-C after its first checkpoint (`run_dir`: the override's value as a user types
    it, Hydra quotes and all), then `command` given the "resume with:" command it printed."""
    def run(e: Env) -> list:
        first = e.run("mltrain", *SMOKE, "train.checkpoint_interval=2", *extra, f"hydra.run.dir={run_dir.format(tmp=e.tmp)}",
                      before=STOP_AFTER_FIRST_CHECKPOINT)
        line = next((x for x in first.stderr.splitlines() if "resume with: " in x), "")
        return [first, command(e, line.split("resume with: ", 1)[-1])]
    return run


def shell(e: Env, cmd: str) -> subprocess.CompletedProcess:
    """Run a printed command as a user would paste it (with `mltrain` meaning the tree under test)."""
    entry = f"{sys.executable} -c 'import sys; from mltrain.cli import train_main; sys.argv[0] = \"mltrain\"; train_main()'"
    cmd = entry + cmd[len("mltrain"):] if cmd.startswith("mltrain") else "false"
    return subprocess.run(["bash", "-c", cmd], cwd=e.tmp, env=e.env, capture_output=True, text=True, timeout=TIMEOUT_S)


def resumed_ok(run_dir: str) -> Callable[[Env, list], Optional[str]]:
    def check(e: Env, procs: list) -> Optional[str]:
        first, second = procs
        d = Path(run_dir.format(tmp=e.tmp))
        if first.returncode != 130:
            return "unclear"
        done = (d / "summary.json").exists() and json.loads((d / "summary.json").read_text()).get("status") == "finished"
        return "good" if second.returncode == 0 and done else "wrong"
    return check


PERMISSION = textwrap.dedent("""
    import errno
    from mltrain.training import checkpoint as _ckpt
    def _denied(path, *a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))
    _ckpt.save_checkpoint = _denied
""")


def never_says(never: str) -> Callable[[Env, list], Optional[str]]:
    """"wrong" when the error line says `never` (a line that lies)."""
    def check(e: Env, procs: list) -> Optional[str]:
        errors = error_lines(procs[-1].stderr)
        if errors and never.lower() in errors[-1].lower():
            return "wrong"  # a line that lies
        return None
    return check


def corrupt_tiktoken(e: Env) -> list:
    cache = e.tmp / "tiktoken"
    cache.mkdir()
    fixtures = next((p / "shared" / "fixtures" / "gpt2-bpe" for p in Path(__file__).resolve().parents
                     if (p / "shared" / "fixtures" / "gpt2-bpe").is_dir()), Path("/nonexistent"))
    # tiktoken's cache names: the sha1 of each file's download URL
    names = {"encoder.json": "6c7ea1a7e38e3a7f062df639a5b80947f075ffe6", "vocab.bpe": "6d1cbeee0f20b3d9449abfede4726ed8212e3aee"}
    for name, cached in names.items():
        data = (fixtures / name).read_bytes() if (fixtures / name).exists() else b"{}"
        (cache / cached).write_bytes(data[:-100] if name == "vocab.bpe" else data)  # vocab.bpe cut short
    offline = {"TIKTOKEN_CACHE_DIR": str(cache), "HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
               "NO_PROXY": "", "no_proxy": ""}
    return [run_into(e, "run", "data.tokenizer=gpt2", env=offline)]


def tiktoken_check(e: Env, procs: list) -> Optional[str]:
    if not (e.tmp / "tiktoken" / "6d1cbeee0f20b3d9449abfede4726ed8212e3aee").exists():
        return "lost"  # the user's cached file deleted
    return never_says("download")(e, procs)


def wandb_rejected(e: Env) -> list:
    return [run_into(e, "run", "logger=wandb", "logger.mode=online", env={
        "WANDB_API_KEY": "short", "HOME": str(e.tmp), "WANDB_CONFIG_DIR": str(e.tmp / "wandb_config"),
        "HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"})]


def wandb_check(e: Env, procs: list) -> Optional[str]:
    err = procs[-1].stderr
    if procs[-1].returncode != 0:
        return "unclear"
    return "wrong" if "no W&B API key" in err or "rejected" not in err else None


def garbage_checkpoint(e: Env) -> list:
    d = unfinished(e)
    for p in checkpoints_of(d):
        p.write_bytes(os.urandom(5000))
    return [resume(e)]


def lines(c: list) -> None:
    ln = "lines that lie"
    odd = "{tmp}/runs, (ü) a"
    c.append(Case(ln, "resume command for a dir with a comma, (), ü", interrupted_then(shell, f"'{odd}'"), expect="ok",
                  check=resumed_ok(odd), **R2))
    quote = "{tmp}/it's here"
    c.append(Case(ln, "resume command for a dir with a quote and a space", interrupted_then(shell, f'"{quote}"'),
                  expect="ok", check=resumed_ok(quote), **R2))
    c.append(Case(ln, "checkpoint: permission denied is not a full disk", lambda e: [run_into(e, "run", before=PERMISSION)],
                  needle="Permission denied", check=never_says("full"), **R2))
    c.append(Case(ln, "corrupt tiktoken cache is not a download failure", corrupt_tiktoken, needle="damaged",
                  check=tiktoken_check, **R2))
    c.append(Case(ln, "W&B rejects the key: not 'no W&B API key'", wandb_rejected, expect="ok", check=wandb_check, **R2))
    c.append(Case(ln, "garbage checkpoint: no weights_only advice", garbage_checkpoint, needle="checkpoint",
                  check=never_says("weights_only"), **R2))
    c.append(Case(ln, "sweep: a job fails at run time, no traceback after", lambda e: [e.run(
        "mltrain", "-m", *SMOKE, "model.block_size=100000000,16", f"hydra.sweep.dir={e.tmp / 'sweep'}")],
        needle="block_size", code=1, **R2))
    c.append(Case(ln, "sweep: a later point's bad value, before any job", lambda e: [e.run(
        "mltrain", "-m", *SMOKE, "coarsening=evenodd", "multilevel.delta=0.5,2.0", f"hydra.sweep.dir={e.tmp / 'sweep'}")],
        needle="multilevel.delta", check=lambda e, p: "wrong" if list((e.tmp / "sweep").glob("*/summary.json")) else None,
        **R2))


def sample_to_head(e: Env) -> list:
    run_into(e, "run")
    # more text than a pipe holds (64 kB): the reader has gone before all of it is written
    entry = command("mltrain-sample", [str(e.tmp / "run"), "--max-new-tokens", "70000"])
    cmd = " ".join(shlex.quote(a) for a in entry) + " | head -c 50 > /dev/null; echo ${PIPESTATUS[0]} >&2"
    p = subprocess.run(["bash", "-c", cmd], cwd=e.tmp, env=e.env, capture_output=True, text=True, timeout=TIMEOUT_S)
    code = int(p.stderr.strip().splitlines()[-1]) if p.stderr.strip() else -1
    clean = "Traceback" not in p.stderr and "Exception ignored" not in p.stderr and not error_lines(p.stderr)
    return [subprocess.CompletedProcess(p.args, 0 if clean and code in (0, 141) else 1, "", p.stderr)]


def sample_ctrl_c(e: Env) -> list:
    run_into(e, "run")
    p = e.start("mltrain-sample", str(e.tmp / "run"), "--max-new-tokens", "100000000", new_session=True)
    _read_while(p, lambda got, rss: len(got) > 20, 30)  # generating (or 30 s gone)
    done = ctrl_c(p)
    done.stdout = ""  # the text is the tool's output, not a message
    return [done]


def sample_args(*args: str) -> Callable[[Env], list]:
    def run(e: Env) -> list:
        run_into(e, "run")
        return [e.run("mltrain-sample", str(e.tmp / "run"), "--max-new-tokens", "20", *args)]
    return run


def export_to(out: str, limits: Optional[dict] = None) -> Callable[[Env], list]:
    def run(e: Env) -> list:
        run_into(e, "run")
        target = out.replace("{file}", str(blocker(e.tmp)) if "{file}" in out else "").replace("{ro}", str(read_only(e.tmp)))
        return [e.run("mltrain-export", str(e.tmp / "run"), target.replace("{tmp}", str(e.tmp)), limits=limits)]
    return run


def nothing_exported(e: Env, procs: list) -> Optional[str]:
    return "lost" if (e.tmp / "out").exists() and list((e.tmp / "out").iterdir()) else None


def tools(c: list) -> None:
    t = "the tools' edges"
    c.append(Case(t, "mltrain-sample ... | head (broken pipe)", sample_to_head, expect="ok", **R2))
    c.append(Case(t, "mltrain-sample: Ctrl-C during generation", sample_ctrl_c, code=130, **R2))
    c.append(Case(t, "mltrain-sample --temperature 1e-45", sample_args("--temperature", "1e-45"), expect="ok", **R2))
    c.append(Case(t, "mltrain-sample --temperature inf", sample_args("--temperature", "inf"), needle="--temperature", **R2))
    c.append(Case(t, "mltrain-sample --prompt not UTF-8", sample_args("--prompt", os.fsdecode(b"caf\xe9 \xff")),
                  needle="UTF-8", **R2))
    c.append(Case(t, "mltrain-export below a file", export_to("{file}/out"), needle="a_file", **R2))
    c.append(Case(t, "mltrain-export into a read-only place", export_to("{ro}/out"), needle="out", **R2))
    c.append(Case(t, "mltrain-export over the file-size limit", export_to("{tmp}/out", {"RLIMIT_FSIZE": 60_000}),
                  needle="out", check=nothing_exported, **R2))


SECRET = "s3cr3t-value-0123456789abcdef0123456789abcdef"


def leaked(e: Env, procs: list) -> Optional[str]:
    """A secret found in any file under the case's folder, or on the console of a resume line."""
    for p in e.tmp.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink() and SECRET.encode() in p.read_bytes():
                return "wrong"
        except OSError:
            continue
    printed = "".join(x.stderr + x.stdout for x in procs)
    return "wrong" if SECRET in printed else None


def secrets(c: list) -> None:
    s = "secrets"
    c.append(Case(s, "+hydra.job.env_set.WANDB_API_KEY (run)", lambda e: [run_into(
        e, "run", f"+hydra.job.env_set.WANDB_API_KEY={SECRET}")], expect="ok", check=leaked, **R2))
    c.append(Case(s, "+hydra.job.env_set.HF_TOKEN (sweep)", lambda e: [e.run(
        "mltrain", "-m", *SMOKE, "seed=0,1", f"+hydra.job.env_set.HF_TOKEN={SECRET}", f"hydra.sweep.dir={e.tmp / 'sweep'}")],
        expect="ok", check=leaked, **R2))
    c.append(Case(s, "W&B offline config and metadata", lambda e: [run_into(
        e, "run", "logger=wandb", "logger.mode=offline", f"+hydra.job.env_set.MY_SERVICE_PASSWORD={SECRET}",
        env={"HOME": str(e.tmp), "WANDB_CONFIG_DIR": str(e.tmp / "wandb_config")})], expect="ok", check=leaked, **R2))
    c.append(Case(s, "the printed resume command and status_reason", interrupted_then(
        lambda e, cmd: subprocess.CompletedProcess([], 0, "", ""), "{tmp}/run",
        f"+hydra.job.env_set.WANDB_API_KEY={SECRET}"), expect="ok",
        check=lambda e, p: leaked(e, p) or ("good" if p[0].returncode == 130 else "unclear"), **R2))


def round_two_cases() -> list[Case]:
    c: list[Case] = []
    for add in (links, foreign, records, resources, distributed_cases, lines, tools, secrets):
        add(c)
    return c


# ---------------------------------------------------------------------------------------------
# Round three (issue 27): the study and the tools around a run. Each class has cases beyond the
# issue's examples. A study case starts from one finished one-rung smoke study, made once per tree.

R3 = dict(round=3)
ONE_RUNG = ["study=smoke", "~ladder.d32"]


def entry_point(tool: str, src: Optional[Path]) -> tuple[str, str]:
    """(module, function) of `tool`'s console script in the tree `src` (its pyproject.toml), so a case
    that must start as the installed script does (a Ctrl-C while it imports) measures each tree's own."""
    root = src or INSTALLED
    text = (root / "pyproject.toml").read_text() if root and (root / "pyproject.toml").exists() else ""
    found = re.search(rf'^{re.escape(tool)} = "([\w.]+):(\w+)"', text, flags=re.M)
    return (found.group(1), found.group(2)) if found else ("mltrain.cli", ENTRY.get(tool, "train_main"))


def study(e: Env, *args: str, before: str = "", env: Optional[dict] = None, study_dir: str = "study",
          timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    code = "\n".join(["import sys", before, "sys.argv = ['mltrain-study', *sys.argv[1:]]",
                      "from mltrain.console import study_main", "study_main()"])
    cmd = [sys.executable, "-c", code, *ONE_RUNG, f"dir={e.tmp / study_dir}", *args]
    try:
        return subprocess.run(cmd, cwd=e.tmp, env={**e.env, **(env or {})}, capture_output=True, text=True,
                              timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired as err:
        text = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")  # noqa: E731
        return subprocess.CompletedProcess(cmd, TIMED_OUT, text(err.stdout), text(err.stderr) + "\n[timed out]")


def finished_study(e: Env) -> Path:
    """A copy, in the case's folder, of one finished one-rung smoke study (made once per tree)."""
    made = Path(e.env["MLTRAIN_CACHE"]).parent / "finished_study"
    if not (made / "ladder.json").exists():
        shutil.rmtree(made, ignore_errors=True)
        proc = study(e, study_dir=str(made), timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"the smoke study did not finish: {(proc.stdout + proc.stderr)[-2000:]}")
    shutil.copytree(made, e.tmp / "study", ignore=shutil.ignore_patterns(".mltrain.lock"))
    return e.tmp / "study"


def study_link(place: str) -> Callable[[Env], list]:
    """A finished study whose `place` is a link out of it (to tmp/outside's victim, or to tmp/outside)."""
    def run(e: Env) -> list:
        root = finished_study(e)
        link = root / place
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        elif link.exists() or link.is_symlink():
            link.unlink()
        link.parent.mkdir(parents=True, exist_ok=True)
        if place.endswith((".md", ".png", ".json", ".log")):
            link.symlink_to(victim(e.tmp))
        else:
            link.symlink_to(e.tmp / "outside", target_is_directory=True)
        return [study(e)]
    return run


def export_linked(e: Env) -> list:
    run_into(e, "run")
    (e.tmp / "out").mkdir()
    (e.tmp / "out" / "model.safetensors").symlink_to(e.tmp / "outside" / "planted.bin")  # dangling: would be created
    return [e.run("mltrain-export", str(e.tmp / "run"), str(e.tmp / "out"))]


def prepare_logs_linked(e: Env) -> list:
    (e.tmp / "docs.txt").write_text("plain text to tokenize. " * 400)
    (e.tmp / "out").mkdir()
    (e.tmp / "out" / ".prepare_logs").symlink_to(e.tmp / "outside", target_is_directory=True)
    return [e.run("mltrain-prepare", f"prepare.data_files={e.tmp / 'docs.txt'}", f"prepare.out_dir={e.tmp / 'out'}",
                  f"prepare.cache_dir={e.tmp / 'hf'}", *PREPARE)]


def compare_png_linked(e: Env) -> list:
    (e.tmp / "report").mkdir()
    (e.tmp / "report" / "comparison.png").symlink_to(e.tmp / "outside" / "victim.txt")
    return [e.run("mltrain-compare", str(e.tmp / "runs"), "--out", str(e.tmp / "report"))]


def links3(c: list) -> None:
    w = "study and tools: writes through links"
    for place in ("ladder.md", "ladder.png", "d16/verdict", "study.log", "d16/selection.json", "d16/eval"):
        c.append(Case(w, f"study: {place} a link out of the study", study_link(place), needle="symbolic link",
                      setup=with_victim(), protect="outside", **R3))
    c.append(Case(w, "compare: comparison.png a link outside", compare_png_linked, needle="comparison.png",
                  setup=with_victim(fake_runs), protect="outside",
                  check=lambda e, p: "lost" if (e.tmp / "outside" / "victim.txt").read_bytes() != VICTIM * 500 else None,
                  **R3))
    c.append(Case(w, "export: model.safetensors a dangling link outside", export_linked, needle="model.safetensors",
                  setup=with_victim(), protect="outside",
                  check=lambda e, p: "lost" if (e.tmp / "outside" / "planted.bin").exists() else None, **R3))
    c.append(Case(w, "prepare: .prepare_logs a link outside", prepare_logs_linked, needle=".prepare_logs",
                  setup=with_victim(), protect="outside", **R3))


GRID_CHANGED = ["arms.multilevel.grid={optim.lr:[0.3,0.1]}",
                "arms.single.grid={optim.lr:[0.3,0.1],train.budget:[0.5,1.0,2.0]}"]


def grid_changed(e: Env) -> list:
    finished_study(e)
    return [study(e, *GRID_CHANGED)]


def reports_only_the_grid(e: Env, procs: list) -> Optional[str]:
    """Nothing the study reports names optim.lr=0.03, which the changed grid no longer has."""
    if procs[-1].returncode != 0:
        return None  # a refusal is judged on its line
    for report in ("d16/verdict/comparison.json", "d16/selection.json", "ladder.json"):
        if "0.03" in set(re.findall(r'optim\.lr(?:=|": ")([0-9][0-9.e+-]*)', (e.tmp / "study" / report).read_text())):
            return "wrong"
    return "good"


def seeds_changed(e: Env) -> list:
    finished_study(e)
    return [study(e, "selection_seeds=[5]")]


def no_seed_0(e: Env, procs: list) -> Optional[str]:
    """The verdict reads no run of seed 0, which the changed selection_seeds no longer ask for."""
    if procs[-1].returncode != 0:
        return None
    text = (e.tmp / "study" / "d16" / "verdict" / "comparison.json").read_text()
    return "wrong" if re.search(r"seed=0[,\"/]", text) else "good"


def edited_selection(e: Env) -> list:
    root = finished_study(e)
    path = root / "d16" / "selection.json"
    saved = json.loads(path.read_text())
    chosen = saved["arms"]["multilevel"]["setting"]["optim.lr"]
    saved["arms"]["multilevel"]["setting"]["optim.lr"] = "0.03" if chosen == "0.3" else "0.3"
    path.write_text(json.dumps(saved))
    return [study(e, "--status")]


def status_distrusts(e: Env, procs: list) -> Optional[str]:
    row = next((line for line in procs[-1].stdout.splitlines() if " eval " in line and "multilevel" in line), "")
    if procs[-1].returncode != 0:
        return "unclear"
    return "good" if "finished" not in row else "wrong"  # a believed edit counts the edited setting's runs


def live_job(e: Env) -> list:
    root = finished_study(e)
    job = next((root / "d16" / "eval" / "multilevel").iterdir())
    (job / "summary.json").unlink()
    with open(job / ".mltrain.lock", "a") as f:  # held, as a live run holds its folder
        fcntl.flock(f, fcntl.LOCK_EX)
        code = ("import sys\nfrom mltrain.console import study_main\nsys.argv = ['mltrain-study', *sys.argv[1:]]\n"
                "study_main()")
        return [subprocess.run([sys.executable, "-c", code, *ONE_RUNG, f"dir={root}", "--status"], cwd=e.tmp, env=e.env,
                               capture_output=True, text=True, timeout=TIMEOUT_S)]


def says_running(e: Env, procs: list) -> Optional[str]:
    row = next((line for line in procs[-1].stdout.splitlines() if " eval " in line and "multilevel" in line), "")
    return "good" if "running" in row and "to resume" not in row else "wrong"


def state3(c: list) -> None:
    s = "study: state from its config"
    c.append(Case(s, "grid changed: old grid's runs in the choice/verdict", grid_changed, expect="ok",
                  check=reports_only_the_grid, **R3))
    c.append(Case(s, "selection_seeds changed: the old seed's runs", seeds_changed, expect="ok",
                  check=no_seed_0, **R3))
    c.append(Case(s, "--status after selection.json edited by hand", edited_selection, expect="ok",
                  check=status_distrusts, **R3))
    c.append(Case(s, "--status: a live study's running job", live_job, expect="ok", check=says_running, **R3))


def study_arg(*args: str) -> Callable[[Env], list]:
    return lambda e: [study(e, *args)]


def own_study(name: str, body: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (tmp / "mine" / "study").mkdir(parents=True, exist_ok=True)
        (tmp / "mine" / "study" / f"{name}.yaml").write_text(f"# @package _global_\ndefaults: [smoke]\nname: {name}\n{body}")
    return setup


def searchpath(e: Env) -> str:
    return f"hydra.searchpath=[file://{e.tmp / 'mine'}]"


def nothing_claimed(e: Env, procs: list) -> Optional[str]:
    """A study refused before it claims its folder leaves none (a run that started: wrong)."""
    return "wrong" if list((e.tmp / "study").rglob("summary.json")) else None


def numbers3(c: list) -> None:
    n = "numbers without common sense"
    for arg, needle in (("tokens_per_param=inf", "tokens_per_param=inf"), ("tokens_per_param=1e15", "tokens_per_param"),
                        ("ladder.d16.tokens_per_param=inf", "ladder.d16.tokens_per_param"),
                        ("launcher.env.OMP_NUM_THREADS=0", "OMP_NUM_THREADS"),
                        ("launcher.env.OMP_NUM_THREADS=abc", "OMP_NUM_THREADS"),
                        ("+launcher.env.MKL_NUM_THREADS=-1", "MKL_NUM_THREADS"),
                        ("predict_params=[inf]", "predict_params"),
                        ("tokens_per_param=50000", "allow_long")):
        c.append(Case(n, f"study {arg}", study_arg(arg), needle=needle, check=nothing_claimed, **R3))
    c.append(Case(n, "study: hydra.* key in an arm's grid", lambda e: [study(e, "study=hydra_grid", searchpath(e))],
                  needle="hydra.job.chdir", setup=own_study("hydra_grid", "arms: {single: {grid: {hydra.job.chdir: [true]}}}\n"),
                  check=nothing_claimed, **R3))
    c.append(Case(n, "study: hydra.* key in common", lambda e: [study(e, "study=hydra_common", searchpath(e))],
                  needle="hydra.job.chdir",
                  setup=own_study("hydra_common", "common: [scale=smoke, hydra.job.chdir=true, device=cpu]\n"),
                  check=nothing_claimed, **R3))
    c.append(cli_case(n, "run: scale=paper on a CPU (days)", "scale=paper", "data=embedded", "data.tokenizer=bytes",
                      "device=cpu", "train.progress=false", "hydra.run.dir={tmp}/run", needle="train.allow_long", **R3))
    c.append(Case(n, "sweep: scale=paper on a CPU (its one job)", lambda e: [e.run(
        "mltrain", "-m", "scale=paper", "data=embedded", "data.tokenizer=bytes", "device=cpu", "train.progress=false",
        "seed=0", f"hydra.sweep.dir={e.tmp / 'sweep'}")], needle="train.allow_long", code=1, **R3))


def shards_folder(tmp: Path) -> None:
    import numpy as np

    (tmp / "shards").mkdir()
    rng = np.random.default_rng(0)
    for name, n in (("d_val_000000.bin", 2000), ("d_train_000001.bin", 5000)):
        header = np.zeros(256, dtype="<i4")
        header[:3] = 20240520, 1, n
        (tmp / "shards" / name).write_bytes(header.tobytes() + rng.integers(0, 256, n).astype("<u2").tobytes())


def shard_rewritten(e: Env) -> list:
    data = ["data=shards", f"data.dir={e.tmp / 'shards'}", "data.tokenizer=bytes"]
    run_into(e, "first", *data, "train.max_steps=2")
    shard = e.tmp / "shards" / "d_train_000001.bin"
    st = os.stat(shard)
    with open(shard, "r+b") as f:  # one id beyond the vocabulary, written in place; then the old mtime back
        f.seek(1024 + 2 * 1234)
        f.write((300).to_bytes(2, "little"))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    return [run_into(e, "second", *data, "train.max_steps=4")]


def before_training(e: Env, procs: list) -> Optional[str]:
    return "wrong" if (e.tmp / "second" / "metrics.jsonl").exists() and procs[-1].returncode == 0 else None


def cache_corrupted(e: Env) -> list:
    (e.tmp / "notes.txt").write_text("some text to train on.\n" * 400)
    args = ["data=text", f"data.path={e.tmp / 'notes.txt'}", f"data.cache_dir={e.tmp / 'cache'}"]
    run_into(e, "first", *args, "train.max_steps=2")
    cached = next((e.tmp / "cache").rglob("*train*.bin"))
    data = bytearray(cached.read_bytes())
    data[10:12] = (60000).to_bytes(2, "little")
    cached.write_bytes(bytes(data))
    return [run_into(e, "second", *args, "train.max_steps=2")]


def caches3(c: list) -> None:
    k = "caches and sidecars"
    c.append(Case(k, "shard rewritten in place, old mtime put back", shard_rewritten, needle="d_train_000001.bin",
                  setup=shards_folder, check=before_training, **R3))
    c.append(Case(k, "token cache file changed under its meta", cache_corrupted, needle="token cache", **R3))
    c.append(Case(k, "sample: model.json says 100,000 blocks", tool_on_edited_model("mltrain-sample", {"n_layer": 100000}),
                  needle="model.json", **R3))
    c.append(Case(k, "export: model.json says 100,000 blocks", tool_on_edited_model("mltrain-export", {"n_layer": 100000}),
                  needle="model.json", **R3))
    c.append(Case(k, "sample: model.json says 4096 positions", tool_on_edited_model("mltrain-sample", {"block_size": 4096}),
                  needle="model.json", **R3))


def prepare_file(name: str, content: bytes, *extra: str) -> Callable[[Env], list]:
    def run(e: Env) -> list:
        (e.tmp / name).write_bytes(content)
        return [e.run("mltrain-prepare", f"prepare.data_files={e.tmp / name}", f"prepare.out_dir={e.tmp / 'out'}",
                      f"prepare.cache_dir={e.tmp / 'hf'}", *PREPARE, *extra)]
    return run


def random_bytes(n: int) -> bytes:
    import numpy as np

    return np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8).tobytes()


def warned_once(word: str) -> Callable[[Env, list], Optional[str]]:
    def check(e: Env, procs: list) -> Optional[str]:
        p = procs[-1]
        if p.returncode != 0:
            return "unclear"
        return "good" if sum(word in line for line in p.stderr.splitlines()) == 1 else "wrong"
    return check


def lossy3(c: list) -> None:
    x = "lossy input"
    c.append(Case(x, "prepare: a .txt of random bytes", prepare_file("blob.txt", random_bytes(30000)), needle="blob.txt",
                  check=lambda e, p: "wrong" if p[-1].returncode == 0 else None, **R3))
    c.append(Case(x, "prepare: a .txt with a few undecodable bytes", prepare_file(
        "few.txt", b"caf\xe9 au lait. " * 5 + b"plain text to tokenize here. " * 800), expect="ok",
        check=warned_once("could not be decoded"), **R3))
    c.append(Case(x, "data=text: the same few undecodable bytes", lambda e: [
        (e.tmp / "few.txt").write_bytes(b"caf\xe9 au lait. " * 5 + b"plain text to tokenize here. " * 800),
        run_into(e, "run", "data=text", f"data.path={e.tmp / 'few.txt'}", "train.max_steps=2")][1:], expect="ok",
        check=warned_once("could not be decoded"), **R3))
    c.append(Case(x, "prepare: an empty .jsonl", prepare_file("docs.jsonl", b""), needle="docs.jsonl",
                  check=never_says("StopIteration"), **R3))
    c.append(Case(x, "prepare: a .jsonl of blank lines", prepare_file("docs.jsonl", b"\n\n\n"), needle="no documents", **R3))


def interrupted_run(e: Env) -> Path:
    run_into(e, "run")
    summary = json.loads((e.tmp / "run" / "summary.json").read_text())
    summary.update(status="interrupted", fine_steps=3)  # as a run stopped by a signal leaves it
    (e.tmp / "run" / "summary.json").write_text(json.dumps(summary))
    return e.tmp / "run"


def partial_export(e: Env) -> list:
    return [e.run("mltrain-export", str(interrupted_run(e)), str(e.tmp / "out"))]


def partial_sample(e: Env) -> list:
    p = e.run("mltrain-sample", str(interrupted_run(e)), "--max-new-tokens", "5")
    p.stdout = ""  # the text is the tool's output
    return [p]


def nan_loss_export(e: Env) -> list:
    run_into(e, "run")
    summary = json.loads((e.tmp / "run" / "summary.json").read_text())
    summary["final_val_loss"] = float("nan")  # finished, but its last held-out loss is not a number
    (e.tmp / "run" / "summary.json").write_text(json.dumps(summary))
    return [e.run("mltrain-export", str(e.tmp / "run"), str(e.tmp / "out"))]


def recorded(tool: str) -> Callable[[Env, list], Optional[str]]:
    def check(e: Env, procs: list) -> Optional[str]:
        p = procs[-1]
        if p.returncode != 0:
            return "unclear"
        warned = sum(line.startswith(f"{tool}: warning:") for line in p.stderr.splitlines()) == 1
        if tool == "mltrain-export":
            config = json.loads((e.tmp / "out" / "config.json").read_text())
            warned = warned and config.get("mltrain_run_status") not in (None, "finished")
        return "good" if warned else "wrong"
    return check


def partial3(c: list) -> None:
    p = "partial results"
    c.append(Case(p, "export: an interrupted run's weights", partial_export, expect="ok", check=recorded("mltrain-export"), **R3))
    c.append(Case(p, "sample: an interrupted run's weights", partial_sample, expect="ok", check=recorded("mltrain-sample"), **R3))
    c.append(Case(p, "export: a finished run whose last val loss is NaN", nan_loss_export, expect="ok",
                  check=recorded("mltrain-export"), **R3))


def labelled_runs(label: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        fake_runs(tmp)
        summary = tmp / "runs" / "b" / "summary.json"
        s = json.loads(summary.read_text())
        s["label"] = label
        summary.write_text(json.dumps(s))
    return setup


def tables_whole(e: Env, procs: list) -> Optional[str]:
    if procs[-1].returncode != 0:
        return "unclear"
    md = (e.tmp / "report" / "comparison.md").read_text()
    return "good" if tables_intact(md) else "wrong"


def tables_intact(md: str) -> bool:
    """Every table line of `md` is a whole row (it starts and ends with `|`), and every row of a table
    has its header's number of cells (an escaped `\\|` is no cell border)."""
    lines = md.splitlines()
    if any(line.startswith("|") and not line.rstrip().endswith("|") for line in lines):
        return False
    tables = re.findall(r"((?:^\|.*\|$\n?)+)", md, flags=re.M)
    return all(len({len(re.split(r"(?<!\\)\|", row)) for row in t.strip().splitlines()}) == 1 for t in tables)


def errors3(c: list) -> None:
    m = "errors that name the problem"
    for name, body, needle in (("badkey", "arms:\n  single:\n    gird: {optim.lr: [1]}\n", "arms.single.gird"),
                               ("badinterp", "common: [scale=smoke, 'train.eval_interval=${nope}']\n", "common[1]"),
                               ("badyaml", "arms: {single: [\n", "badyaml.yaml"),
                               ("badarm", "arms: {extra: {experiment: multilevel, gird: {}}}\n", "arms.extra.gird")):
        c.append(Case(m, f"study yaml: {name}", lambda e, n=name: [study(e, f"study={n}", searchpath(e))],
                      needle=needle, setup=own_study(name, body), **R3))
    c.append(Case(m, "study: a malformed override", study_arg("common=[scale=smoke,a=b]"), needle="common=[", **R3))
    for label, what in (("coarsening=evenodd,+data.path=/x|y", "|"), ("coarsening=evenodd,+data.path=/x\ny", "newline"),
                        ("coarsening=evenodd,+note=a|b\n# c", "| and # at a line start")):
        c.append(Case(m, f"compare: a label with {what}", lambda e: [e.run(
            "mltrain-compare", str(e.tmp / "runs"), "--out", str(e.tmp / "report"))], expect="ok",
            setup=labelled_runs(label), check=tables_whole, **R3))


def wandb_no_network(e: Env) -> list:
    env = {"WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567", "WANDB_MODE": "online", "HOME": str(e.tmp),
           "WANDB_CONFIG_DIR": str(e.tmp / "wandb_config"), "HTTPS_PROXY": "http://127.0.0.1:9",
           "https_proxy": "http://127.0.0.1:9", "NO_PROXY": "", "no_proxy": ""}
    started = time.perf_counter()
    base = run_into(e, "base", "logger=wandb", "logger.mode=offline", env={**env, "WANDB_MODE": "offline"})
    plain = time.perf_counter() - started
    started = time.perf_counter()
    p = run_into(e, "run", "logger=wandb", env=env)
    p.stderr += f"\n[{time.perf_counter() - started - plain:.0f} s longer than the same run with W&B offline]"
    p.waited = time.perf_counter() - started - plain  # type: ignore[attr-defined]
    return [base, p]


def wandb_bounded(e: Env, procs: list) -> Optional[str]:
    p = procs[-1]
    if p.returncode != 0:
        return "unclear"
    said = sum("offline" in line and ("W&B" in line or "wandb" in line.lower()) and "WARNING" in line
               for line in p.stderr.splitlines())
    return "hung" if p.waited > 20 else "good" if said == 1 else "wrong"


CTRL_C_AT_TORCH = textwrap.dedent("""
    import importlib.abc, os, signal, sys
    class _CtrlCAtTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch":
                sys.meta_path.remove(self)
                os.kill(os.getpid(), signal.SIGINT)
            return None
    sys.meta_path.insert(0, _CtrlCAtTorch())
""")


def ctrl_c_at_import(tool: str, *args: str) -> Callable[[Env], list]:
    def run(e: Env) -> list:
        module, function = entry_point(tool, e.src)
        code = "\n".join([CTRL_C_AT_TORCH, f"sys.argv = [{tool!r}, *sys.argv[1:]]", f"from {module} import {function}",
                          f"sys.exit({function}())"])
        resolved = [a.replace("{tmp}", str(e.tmp)) for a in args]
        return [subprocess.run([sys.executable, "-c", code, *resolved], cwd=e.tmp, env=e.env, capture_output=True,
                               text=True, timeout=TIMEOUT_S, errors="replace")]
    return run


FULL_AT_THE_PLOT = textwrap.dedent("""
    import resource
    from mltrain.tools.study import ladder as _ladder
    _plot = _ladder.plot_ladder
    def _full_disk_plot(*a, **k):
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))  # the disk fills as the plot is written
        return _plot(*a, **k)
    _ladder.plot_ladder = _full_disk_plot
""")


def full_at_the_plot(e: Env) -> list:
    root = finished_study(e)
    (root / "ladder.png").unlink()
    return [study(e, before=FULL_AT_THE_PLOT)]


def edges3(c: list) -> None:
    g = "stalls and noise at the edges"
    c.append(Case(g, "W&B online, a key, no network", wandb_no_network, expect="ok", check=wandb_bounded, **R3))
    c.append(Case(g, "mltrain: Ctrl-C while torch imports", ctrl_c_at_import("mltrain", *SMOKE, "hydra.run.dir={tmp}/run"),
                  needle="mltrain", code=130, **R3))
    c.append(Case(g, "mltrain-study: Ctrl-C while torch imports", ctrl_c_at_import("mltrain-study", *ONE_RUNG,
                  "dir={tmp}/study"), needle="mltrain-study", code=130, **R3))
    c.append(Case(g, "mltrain-sample: Ctrl-C while torch imports", ctrl_c_at_import("mltrain-sample", "{tmp}/none"),
                  needle="mltrain-sample", code=130, **R3))
    c.append(Case(g, "study: the disk fills at the ladder plot", full_at_the_plot, needle="ladder.png", **R3))


def round_three_cases() -> list[Case]:
    c: list[Case] = []
    for add in (links3, state3, numbers3, caches3, lossy3, partial3, errors3, edges3):
        add(c)
    return c


# ---------------------------------------------------------------------------------------------
# judging


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if ERROR_WORDS.search(line) and "HYDRA_FULL_ERROR" not in line]


def judge(case: Case, e: Env, procs: list, before: dict) -> str:
    # The worst outcome wins: lost or mixed data, then a traceback, then the rest.
    if case.protect and tree(e.tmp / case.protect) != before:
        return "lost"
    verdict = case.check(e, procs) if case.check is not None else None
    if verdict == "lost":
        return verdict
    if "Traceback" in "".join(p.stdout + p.stderr for p in procs):
        return "traceback"
    if verdict is not None:
        return verdict
    p = procs[-1]
    if p.returncode == TIMED_OUT:
        return "hung" if case.round >= 2 else "wrong"
    if case.expect == "ok":
        return "good" if all(q.returncode == 0 for q in procs) else "unclear"
    if p.returncode == 0:
        return "wrong"
    errors = error_lines(p.stderr)
    clear = (p.returncode == case.code and len(errors) == 1 and not error_lines(p.stdout)
             and (case.needle in errors[0] or case.needle == ""))
    return "good" if clear else "unclear"


def run_tree(label: str, src: Optional[Path], selected: list[Case], verbose: bool) -> dict[str, list[str]]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if src is not None and src.resolve() != INSTALLED:
        src = src.resolve()
        if not (src / "mltrain" / "conf").exists():  # a plain checkout: its conf/ as the mltrain.conf package
            (src / "mltrain" / "conf").symlink_to(src / "conf")
        env["PYTHONPATH"] = str(src)
    results: dict[str, list[str]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="mltrain_faults_") as home:
        env["MLTRAIN_CACHE"] = str(Path(home) / "cache")  # one warm token cache for all cases of this tree
        env["MLTRAIN_DATA"] = str(Path(home) / "data")
        for case in selected:
            with tempfile.TemporaryDirectory(prefix="case_", dir=home) as tmp:
                marker = uuid.uuid4().hex  # in the environment of every process the case starts
                e = Env(Path(tmp), {**env, "MLTRAIN_FAULT_CASE": marker}, src)
                if case.setup:
                    case.setup(e.tmp)
                before = tree(e.tmp / case.protect) if case.protect else {}
                started = time.perf_counter()
                procs = case.run(e)
                verdict = judge(case, e, procs, before)
                left = leftovers(marker)
                if left:  # a process the case started outlived it: end it (by pid) and count it
                    for pid in left:
                        with contextlib.suppress(OSError):
                            os.kill(pid, signal.SIGKILL)
                    verdict = verdict if verdict in ("lost", "traceback") else "wrong"
                    procs[-1].stderr += f"\n[{len(left)} process(es) left behind]"
                results[case.cls].append(verdict)
                if verbose:
                    last = procs[-1]
                    tail = (error_lines(last.stderr + last.stdout) or last.stderr.strip().splitlines()[-1:] or [""])[-1]
                    print(f"[{label}] {verdict:10s} {case.cls:24s} {case.name:48s} rc={last.returncode} "
                          f"{time.perf_counter() - started:5.1f}s | {tail[:160]}", flush=True)
    return results


def table(all_results: dict[str, dict[str, list[str]]], selected: list[Case]) -> str:
    classes = list(dict.fromkeys(c.cls for c in selected))
    labels = list(all_results)
    head = "| class | cases | " + " | ".join(f"{lab}: " + " / ".join(OUTCOMES) for lab in labels) + " |"
    lines = [head, "|" + "---|" * (2 + len(labels))]
    totals = {lab: Counter() for lab in labels}
    for cls in classes:
        n = sum(1 for c in selected if c.cls == cls)
        cells = []
        for lab in labels:
            count = Counter(all_results[lab][cls])
            totals[lab].update(count)
            cells.append(" / ".join(str(count[o]) for o in OUTCOMES))
        lines.append(f"| {cls} | {n} | " + " | ".join(cells) + " |")
    lines.append(f"| all | {len(selected)} | " + " | ".join(" / ".join(str(totals[lab][o]) for o in OUTCOMES)
                                                          for lab in labels) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", action="append", default=[], metavar="LABEL=DIR",
                    help="a source tree to measure (repeatable); default: the installed mltrain")
    ap.add_argument("--only", help="run only the classes whose name contains one of these comma-separated texts")
    ap.add_argument("--round", type=int, choices=(1, 2, 3),
                    help="run only round one's (issue 11), two's (issue 20) or three's (issue 27) classes")
    ap.add_argument("--case", help="run only the cases whose name contains this text")
    ap.add_argument("--quiet", action="store_true", help="print only the table")
    args = ap.parse_args()
    wanted = [w for w in (args.only or "").split(",") if w]
    selected = [c for c in [*cases(), *round_two_cases(), *round_three_cases()] if (not wanted or any(w in c.cls for w in wanted))
                and (args.round is None or c.round == args.round) and (not args.case or args.case in c.name)]
    trees = [s.split("=", 1) for s in args.src] or [["installed", None]]
    results = {}
    for label, src in trees:
        results[label] = run_tree(label, Path(src) if src else None, selected, not args.quiet)
    print()
    print(table(results, selected))


if __name__ == "__main__":
    main()
