"""Run mltrain's fault matrix (bad input and faults a user meets) against one or more source trees and
print the outcomes by class.

    python scripts/fault_matrix.py                                  # the installed mltrain
    python scripts/fault_matrix.py --src before=/tmp/main --src after=.   # two trees side by side

Every case is a bad input or a fault a user meets (a typo'd key, NaN, a read-only folder, a full disk,
two runs in one folder, ...), run through the console entry points in a fresh temporary folder, each in
its own process. Outcomes:

    good       one clear error line (exit 2, or 130 for Ctrl-C), no traceback, earlier output
               unchanged; or, for a case that must succeed, success
    traceback  a Python traceback on the console
    wrong      finished "successfully" with a wrong result (a key or a value silently ignored, a binary
               file trained on, a run refused that should have run)
    lost/mixed earlier output changed, or two runs' rows in one file
    unclear    failed without a traceback but not with one clear line naming the problem

A `--src` tree is put first on PYTHONPATH (its `conf/` is linked as `mltrain/conf` when missing), so a
checkout of any commit can be measured with the same venv: `git archive main | tar -x -C /tmp/main`.
Cases that could allocate a huge model run under a 6 GB address-space limit.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Optional

ERROR_WORDS = re.compile(r"error|traceback|exception|: interrupted:", re.IGNORECASE)  # the Ctrl-C line too
OUTCOMES = ["good", "traceback", "wrong", "lost/mixed", "unclear"]
SMOKE = ["scale=smoke", "train.progress=false"]
TINY = ["model.n_layer=2", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=4",
        "train.progress=false", "train.eval_batches=2"]
PREPARE = ["prepare.tokenizer=bytes", "prepare.shard_tokens=2000", "prepare.val_tokens=1000",
           "prepare.progress=false", "prepare.docs_per_task=4", "prepare.workers=1"]
NO_ROOM = {"RLIMIT_AS": 6 * 2**30}
_spec = importlib.util.find_spec("mltrain")  # where the installed mltrain lives (not imported here)
INSTALLED = Path(_spec.origin).resolve().parents[1] if _spec and _spec.origin else None
TIMEOUT_S = 120  # every case ends in seconds when handled; one still running by then is judged "wrong"
TIMED_OUT = -9
ENTRY = {"mltrain": "train_main", "mltrain-prepare": "prepare_main", "mltrain-compare": "compare_main"}


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
        f"from mltrain.cli import {ENTRY[tool]}",
        f"{ENTRY[tool]}()",
    ])
    return [sys.executable, "-c", code, *args]


@dataclass
class Env:
    tmp: Path
    env: dict

    def run(self, tool: str, *args: str, cwd: Optional[Path] = None, limits: Optional[dict] = None,
            before: str = "", new_session: bool = False) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(command(tool, list(args), limits, before), cwd=cwd or self.tmp, env=self.env,
                                  capture_output=True, text=True, timeout=TIMEOUT_S, start_new_session=new_session)
        except subprocess.TimeoutExpired as err:  # a run that goes on and on with a nonsense value: "wrong"
            text = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")  # noqa: E731
            return subprocess.CompletedProcess(err.cmd, TIMED_OUT, text(err.stdout), text(err.stderr) + "\n[timed out]")

    def start(self, tool: str, *args: str, cwd: Optional[Path] = None) -> subprocess.Popen:
        return subprocess.Popen(command(tool, list(args)), cwd=cwd or self.tmp, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


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
        return "lost/mixed"
    refused = [p for p in procs if p.returncode != 0]
    if codes == [0, 2] and len(error_lines(refused[0].stderr)) == 1:
        return "good"
    return "unclear"


def default_dirs_check(e: Env, procs: list) -> Optional[str]:
    metrics = list((e.tmp / "outputs").rglob("metrics.jsonl"))
    if any(not one_run_of_rows(m) for m in metrics):
        return "lost/mixed"
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
        return "lost/mixed"
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
        return "lost/mixed"
    return None


def cache_full_check(e: Env, procs: list) -> Optional[str]:
    cache = e.tmp / "cache"
    return "lost/mixed" if cache.exists() and [p for p in cache.rglob("*") if p.is_file()] else None


def cases() -> list[Case]:
    c: list[Case] = []
    # Runs that mix
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
    # Keys that vanish
    for o, key in (("+train.max_step=3", "train.max_step"), ("++train.max_step=3", "train.max_step"), ("+foo=1", "foo"),
                   ("+model.n_layers=2", "model.n_layers"), ("+multilevel.coarse_optim.lr_min=0.1", "lr_min"),
                   ("+data.paths=x.txt", "data.paths"), ("+train.eval_every=5", "train.eval_every")):
        c.append(cli_case("keys that vanish", o, *SMOKE, o, "hydra.run.dir={tmp}/run", needle=key))
    # Values that slip through
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
    # Tracebacks for ordinary trouble
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
    # Full disk
    d = "full disk"
    c.append(Case(d, "metrics.jsonl at the file-size limit", full_disk_run, needle="metrics.jsonl", check=full_disk_check))
    c.append(Case(d, "final checkpoint and weights at the file-size limit", full_disk_end, needle="checkpoint", check=full_disk_check))
    c.append(Case(d, "token cache at the file-size limit", lambda e: [e.run(
        "mltrain", *SMOKE, f"data.cache_dir={e.tmp / 'cache'}", f"hydra.run.dir={e.tmp / 'run'}",
        limits={"RLIMIT_FSIZE": 100_000})], needle="cache", check=cache_full_check))
    c.append(prepare_case("prepare: shards at the file-size limit", docs(), "prepare.shard_tokens=20000",
                          limits={"RLIMIT_FSIZE": 30_000}, needle="shard"))
    # Data that is not text
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
    # Expensive before cheap
    o = "expensive before cheap"
    c.append(cli_case(o, "model.block_size=100000000 (data too short)", *SMOKE, "model.block_size=100000000",
                      "hydra.run.dir={tmp}/run", needle="block_size", limits=NO_ROOM))
    c.append(cli_case(o, "a 206B-parameter model", *SMOKE, "model.n_layer=64", "model.n_embd=16384", "model.n_head=16",
                      "hydra.run.dir={tmp}/run", needle="parameters", limits=NO_ROOM))
    c.append(cli_case(o, "train.batch_size=20000000", *SMOKE, "train.batch_size=20000000", "hydra.run.dir={tmp}/run",
                      needle="batch", limits=NO_ROOM))
    c.append(cli_case(o, "model.vocab_size=10000000000", *SMOKE, "model.vocab_size=10000000000", "hydra.run.dir={tmp}/run",
                      needle="parameters", limits=NO_ROOM))
    return c


# ---------------------------------------------------------------------------------------------
# judging


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if ERROR_WORDS.search(line) and "HYDRA_FULL_ERROR" not in line]


def judge(case: Case, e: Env, procs: list, before: dict) -> str:
    # The worst outcome wins: lost or mixed data, then a traceback, then the rest.
    if case.protect and tree(e.tmp / case.protect) != before:
        return "lost/mixed"
    verdict = case.check(e, procs) if case.check is not None else None
    if verdict == "lost/mixed":
        return verdict
    if "Traceback" in "".join(p.stdout + p.stderr for p in procs):
        return "traceback"
    if verdict is not None:
        return verdict
    p = procs[-1]
    if p.returncode == TIMED_OUT:
        return "wrong"
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
                e = Env(Path(tmp), env)
                if case.setup:
                    case.setup(e.tmp)
                before = tree(e.tmp / case.protect) if case.protect else {}
                started = time.perf_counter()
                procs = case.run(e)
                verdict = judge(case, e, procs, before)
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
    ap.add_argument("--only", help="run only the classes whose name contains this text")
    ap.add_argument("--quiet", action="store_true", help="print only the table")
    args = ap.parse_args()
    selected = [c for c in cases() if not args.only or args.only in c.cls]
    trees = [s.split("=", 1) for s in args.src] or [["installed", None]]
    results = {}
    for label, src in trees:
        results[label] = run_tree(label, Path(src) if src else None, selected, not args.quiet)
    print()
    print(table(results, selected))


if __name__ == "__main__":
    main()
