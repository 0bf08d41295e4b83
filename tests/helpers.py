"""The helpers the tests share, in one module: the tests' training size and config composition, a
run's files read back, the CLI and the tools run in subprocesses (and stopped, killed, waited for), made-up
run dirs and weights, and a stand-in for mltrain-compare's tuned verdict."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from mltrain.config import Config, register_configs
from mltrain.config import typed as typed_config
from mltrain.model.gpt import GPT, GPTConfig
from mltrain.runs.files import METRICS, read_metrics
from mltrain.runs.keys import BUDGET_KEY, SEED_KEY, override_key, override_value
from mltrain.runs.names import run_label
from mltrain.runs.rundir import LOCK_FILE
from mltrain.runs.weights import save_weights
from mltrain.tools.compare import main as compare_main
from mltrain.tools.study.cli import main as study_main


REPO = Path(__file__).resolve().parents[1]
GPT2_FIXTURES = REPO.parent / "shared" / "fixtures" / "gpt2-bpe"
# tiktoken's cache names: the sha1 of each file's download URL (see ../shared/fixtures/README.md).
GPT2_CACHE_NAMES = {
    "encoder.json": "6c7ea1a7e38e3a7f062df639a5b80947f075ffe6",
    "vocab.bpe": "6d1cbeee0f20b3d9449abfede4726ed8212e3aee",
}


# The tests' one training size: seconds on 2 CPU cores, big enough to learn. `ML` adds a short
# multilevel plan (3 cycles of 2 coarse models x 4 steps).
TINY = ["model.n_layer=4", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=4",
        "train.max_steps=24", "train.eval_interval=12", "train.eval_tokens=128", "train.log_interval=4",
        "train.progress=false", "schedule.warmup_steps=2"]
ML = ["coarsening=evenodd", "multilevel.n_cycles=3", "multilevel.coarse_steps=4", "multilevel.coarse_log_interval=2"]


# Compositions made so far in this process: (overrides, hydra, what the ConfigStore held) -> (config, the
# store's nodes, kept so that their ids stay theirs). A composition takes ~130 ms, a copy of one ~4 ms.
_COMPOSED: dict[tuple, tuple] = {}


def _store_state() -> tuple[tuple, list]:
    """What the ConfigStore holds, by name and node identity (a method or preset registered since makes
    another key), and the nodes themselves."""
    names, nodes = [], []

    def walk(tree: dict, prefix: str) -> None:
        for name, entry in tree.items():
            if isinstance(entry, dict):
                walk(entry, f"{prefix}{name}/")
            else:
                names.append((prefix + name, id(entry.node)))
                nodes.append(entry.node)

    walk(ConfigStore.instance().repo, "")
    return tuple(names), nodes


def compose_config(*overrides: str, tiny: bool = True, hydra: bool = False):
    """The config `mltrain <overrides>` would run (at the tests' size unless tiny=False), with the depth
    methods registered now: a copy of the same composition made earlier in this process, if any (not
    with a search path: its files may have changed since)."""
    register_configs()
    full = [*(TINY if tiny else []), *overrides]
    names, nodes = _store_state()
    # (Hydra's own node records the working directory)
    key = None if any("searchpath" in o for o in full) else (tuple(full), hydra and os.getcwd(), names)
    if key in _COMPOSED:
        return copy.deepcopy(_COMPOSED[key][0])
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = compose("config", overrides=full, return_hydra_config=hydra)
    if key is not None:
        _COMPOSED[key] = (copy.deepcopy(cfg), nodes)
    return cfg


def typed(cfg) -> Config:
    """A composed config as the typed `Config` the code below the CLI takes, made as the CLI makes it
    (mltrain.config.typed: its keys checked, then OmegaConf.to_object)."""
    return typed_config(cfg)


def read_rows(run_dir: Path) -> list[dict]:
    """The run's metrics rows, every line a whole row (runs/files.py read_metrics, strict)."""
    return read_metrics(run_dir / METRICS, strict=True)


# A smoke-sized multilevel run, spelt out (not a preset) so that preset changes do not move it.
SMALL = ["model.n_layer=2", "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.batch_size=4",
         "train.eval_tokens=64", "schedule.warmup_steps=1", "train.progress=false", "device=cpu"]
TIME_COLUMNS = {"time_s", "train_time_s", "tokens_per_s", "mfu", "wall_time_s"}
# One intra-op thread: these models are tiny, and on a shared 2-core machine a second spinning thread per
# process slows a step tenfold. (Exactness needs only the same setting in the runs compared.)
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def cli(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mltrain.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def start(args: list[str], cwd: Path, env: Optional[dict] = None) -> subprocess.Popen:
    """A CLI run in the background; its stderr goes to cwd/stderr-<n>.txt (no pipe to fill up)."""
    n = len(list(cwd.glob("stderr-*.txt")))
    err = open(cwd / f"stderr-{n}.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "mltrain.cli", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=err, env={**ENV, **(env or {})})
    proc.stderr_path = cwd / f"stderr-{n}.txt"  # type: ignore[attr-defined]
    return proc


def wait_until(proc: subprocess.Popen, condition: Callable[[], bool], timeout: float = 300) -> None:
    """Poll `condition` every few ms while `proc` runs; fail if it ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (status {proc.returncode}) first:\n{stderr_of(proc)[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting")
        time.sleep(0.003)


def stderr_of(proc: subprocess.Popen) -> str:
    return Path(proc.stderr_path).read_text()  # type: ignore[attr-defined]


def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL, timeout: float = 300) -> int:
    proc.send_signal(sig)
    return proc.wait(timeout=timeout)


def checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoint files, oldest first (by the optimizer-step count in their names)."""
    found = [(int(p.stem.split("-")[2]), p) for p in (run_dir / "checkpoints").glob("step-*.pt")]
    return [p for _, p in sorted(found)]


def name_position(path: Path) -> tuple[int, int]:
    """(fine steps, optimizer steps) from a checkpoint's file name."""
    _, fine, total = path.stem.split("-")
    return int(fine), int(total)


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def plan_position(path: Path) -> tuple[str, int]:
    """(the plan phase a checkpoint stands in, step within it)."""
    payload = load(path)
    at = payload["runner"]["position"]  # the runner's own record
    return payload["identity"]["plan"][at["phase_index"]], at["step_in_phase"]


def rows(run_dir: Path) -> list[dict]:
    return read_metrics(run_dir / METRICS, strict=True)


def without_time(items: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in items]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def uninterrupted_run(args: list[str], tmp_path: Path) -> Path:
    """`mltrain args` run to the end in tmp_path/whole (in this process: cli_here), the reference a
    stopped-and-resumed run must equal."""
    whole = tmp_path / "whole"
    proc = cli_here([*args, f"hydra.run.dir={whole}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return whole


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder`: its bytes and modification time. Not the run-dir lock (rundir.LOCK_FILE):
    each run that claims the dir, a resume too, writes its own pid there."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != LOCK_FILE}


def final_state(run_dir: Path) -> dict:
    return load(checkpoints(run_dir)[-1])["runner"]


def assert_same_weights(a: dict, b: dict) -> None:
    assert a["model"].keys() == b["model"].keys()
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def one_line(text: str, needle: str) -> Optional[str]:
    """The one line of `text` containing `needle` (fails if there are several)."""
    lines = [line for line in text.splitlines() if needle in line]
    assert len(lines) == 1, text[-3000:]
    return lines[0]


def processes_running(*words: str) -> list[int]:
    """Ids of this machine's processes whose command line holds all `words` (Linux /proc)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if proc.name.isdigit() and all(w in cmdline for w in words):
            found.append(int(proc.name))
    return found


def _standin_runs(paths: list) -> list[dict]:
    runs = []
    for path in paths:
        for summary_path in sorted(Path(path).rglob("summary.json")):
            summary = json.loads(summary_path.read_text())
            overrides = list(OmegaConf.load(summary_path.parent / ".hydra" / "overrides.yaml"))
            runs.append({"summary": summary, "overrides": overrides,
                         "values": {override_key(o): override_value(o) for o in overrides
                                    if override_value(o) is not None}})
    return runs


def _standin_best(runs: list[dict], tune: list[str], seeds: list) -> dict:
    by_setting: dict[tuple, list[float]] = {}
    for r in runs:
        if r["summary"]["seed"] in seeds and r["summary"]["status"] == "finished":
            setting = tuple((k, float(r["values"][k])) for k in tune if k in r["values"])
            by_setting.setdefault(setting, []).append(r["summary"]["final_val_loss"])
    return dict(min(by_setting, key=lambda s: np.mean(by_setting[s]))) if by_setting else {}


def standin_compare_dirs(paths, out=None, select_seeds=None, tune=(), plot=True) -> dict:
    select_seeds, tune = list(select_seeds or []), list(tune)
    groups: dict[str, list[dict]] = {}
    for r in _standin_runs(paths):
        kept = [o for o in r["overrides"] if override_key(o) not in {*tune, BUDGET_KEY, SEED_KEY}]
        groups.setdefault(run_label(kept, r["summary"]["run_kind"]), []).append(r)
    arms = []
    for label, runs in groups.items():
        kind = runs[0]["summary"]["run_kind"]
        budgets = sorted({r["summary"]["budget"] for r in runs})
        by_budget = {str(b): _standin_best([r for r in runs if r["summary"]["budget"] == b], tune, select_seeds)
                     for b in budgets} if kind == "single" else {}
        selected = by_budget.get("1.0") or _standin_best(runs, tune, select_seeds)
        chosen = [r for r in runs if r["summary"]["seed"] not in select_seeds and r["summary"]["budget"] == 1.0
                  and all(float(r["values"].get(k, "nan")) == v for k, v in selected.items())]
        losses = [r["summary"]["final_val_loss"] for r in chosen]
        arms.append({
            "arm": label, "label": label, "run_kind": kind, "settings_tried": len({tuple(r["values"].get(k) for k in tune) for r in runs}),
            "selection_seeds": select_seeds, "eval_seeds": sorted({r["summary"]["seed"] for r in chosen}),
            "selected": selected, "selected_by_budget": by_budget,
            "final_val_loss": {"mean": float(np.mean(losses)) if losses else None, "n": len(losses)},
            "multiplier": {"available": False, "why": "stand-in verdict"},
        })
    report = {"arms": arms, "frontier": {"points": [], "fit": {"available": False, "why": "stand-in"}},
              "warnings": [], "optimistic": not select_seeds}
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "comparison.json").write_text(json.dumps(report, indent=1, sort_keys=True))
        (Path(out) / "comparison.md").write_text("stand-in verdict\n")
    return report


SMALL_MODEL = dict(vocab_size=256, n_layer=2, n_head=2, n_embd=32, block_size=16)
# Every LayerNorm/bias combination GPT-2 can represent, and RMSNorm, which it cannot.
VARIANTS = {
    "paper": dict(),  # no biases, parameter-free LayerNorm (gpt22m's shape)
    "bias_affine": dict(bias=True, norm_affine=True),
    "affine_no_bias": dict(norm_affine=True),
    "bias_plain_norm": dict(bias=True),
}


def random_model(seed: int = 0, **overrides) -> GPT:
    """A GPT whose every parameter (norm weights and biases included) is random, so a wrong mapping shows."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**{**SMALL_MODEL, **overrides}))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def saved_run(tmp_path: Path, name: str = "run", tokenizer: str = "bytes", **overrides) -> tuple[Path, GPT]:
    model = random_model(**overrides)
    run_dir = tmp_path / name
    save_weights(run_dir, model, tokenizer)
    return run_dir, model


def sweep_summaries(sweep):
    return {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("*/summary.json")}


DATA = {"description": "embedded, bytes: 1,000 train / 100 val tokens", "tokenizer": "bytes"}
HELD = {"batches": 4, "sequences": 64, "tokens": 4096, "fingerprint": "abc"}


def linear_run(root: Path, name: str, kind: str, label: str, seed, *, flops: float, val: float,
             flops_blocks: float | None = None, budget: float = 1.0, n: int = 10, nan_at: int | None = None,
             summary: dict | None = None, write_summary: bool = True) -> Path:
    """A run whose val loss falls linearly from val + 1 to `val` over `n` rows ending at `flops` total
    FLOPs (train loss = val loss - 0.05 on the same rows)."""
    d = root / name
    d.mkdir(parents=True)
    fb_end = flops if flops_blocks is None else flops_blocks
    rows = []
    for i in range(n + 1):
        f, fb = flops * i / n, fb_end * i / n
        loss = val + 1.0 - i / n
        if nan_at is not None and i >= nan_at:
            loss = math.nan
        if i:
            rows.append({"step": i, "flops": f, "flops_blocks": fb, "tokens": i, "time_s": 0.0, "level": 0,
                         "phase": "fine", "train/loss": loss - 0.05, "lr": 1e-3})
        rows.append({"step": i, "flops": f, "flops_blocks": fb, "tokens": i, "time_s": 0.0, "level": 0,
                     "val/loss": loss})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if write_summary:
        s = {"run_kind": kind, "label": label, "seed": seed, "total_flops": flops, "total_flops_blocks": fb_end,
             "budget": budget, "final_val_loss": rows[-1]["val/loss"], "final_train_loss": rows[-2]["train/loss"],
             "final_val_loss_se": 0.004, "flops_formula": "3*(2*N+4*L*T*d)", "data": DATA, "held_out": HELD,
             **(summary or {})}
        (d / "summary.json").write_text(json.dumps(s))
    return d


def report_of(root: Path, capsys, *extra) -> tuple[dict, str]:
    rc = compare_main([str(root), "--smooth", "1", "--out", str(root / "out"), *extra])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    return json.loads((root / "out" / "comparison.json").read_text()), cap.out


def run_main(*argv: str, capsys=None) -> tuple[int, str, str]:
    out = io.StringIO()
    code = study_main(list(argv), out=out)
    err = capsys.readouterr().err if capsys is not None else ""
    return code, out.getvalue(), err


SMOKE = ["scale=smoke", "train.progress=false"]
ERROR_WORDS = re.compile(r"error|traceback|exception", re.IGNORECASE)


def run_tool(tool: str, *args: str, cwd: Path, limits: dict | None = None, env: dict | None = None,
             timeout: int = 300) -> subprocess.CompletedProcess:
    """Run a console entry point (`mltrain`, `mltrain-prepare`, `mltrain-compare`) in a fresh process,
    optionally under resource limits (RLIMIT_FSIZE: a full disk; RLIMIT_AS: no room for a huge model)."""
    entry = {"mltrain": "train_main", "mltrain-prepare": "prepare_main", "mltrain-compare": "compare_main"}[tool]
    module = "mltrain.cli" if tool == "mltrain" else "mltrain.console"  # as pyproject.toml's scripts name them
    code = textwrap.dedent(f"""
        import resource, sys
        for name, value in {limits or {}!r}.items():
            resource.setrlimit(getattr(resource, name), (value, value))
        sys.argv = [{tool!r}, *sys.argv[1:]]
        from {module} import {entry}
        {entry}()
    """)
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def one_error(proc: subprocess.CompletedProcess, tool: str = "mltrain", code: int = 2, kind: str = "error") -> str:
    """Assert `proc` stopped with `code` and exactly one error line (`<tool>: <kind>: ...`) on stderr,
    no traceback anywhere; return that line."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    errors = [line for line in proc.stderr.splitlines() if ERROR_WORDS.search(line) or line.startswith(f"{tool}: ")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert errors[0].startswith(f"{tool}: {kind}: "), errors
    assert not ERROR_WORDS.search(proc.stdout), proc.stdout[-2000:]
    return errors[0]


def file_tree(path: Path) -> dict[str, bytes]:
    """Every file under `path` (hidden ones included) with its bytes: "earlier output" to compare."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def unwritable_dir(tmp_path: Path) -> Path:
    """A directory nobody can create files in (root ignores permission bits: /sys refuses even root)."""
    if os.geteuid() != 0:
        d = tmp_path / "read_only"
        d.mkdir()
        d.chmod(0o555)
        return d
    probe = Path("/sys/mltrain_probe")
    try:
        probe.mkdir()
    except OSError:
        return Path("/sys")
    probe.rmdir()
    pytest.skip("no directory here refuses root")


def make_earlier_run(path: Path) -> Path:
    """A run directory as a killed run leaves it: .hydra/, a log and some rows, no summary."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text("seed: 7\n")
    (path / ".hydra" / "overrides.yaml").write_text("- seed=7\n")
    (path / "cli.log").write_text("[earlier] started\n")
    (path / "metrics.jsonl").write_text('{"step": 0, "flops": 0.0, "val/loss": 5.5}\n')
    return path


def jsonl_file(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


PREPARE = ["prepare.tokenizer=bytes", "prepare.shard_tokens=2000", "prepare.val_tokens=1000",
           "prepare.progress=false", "prepare.docs_per_task=4"]


def fake_run_dir(root: Path, name: str, kind: str, label: str) -> Path:
    d = root / name
    d.mkdir(parents=True)
    rows = [{"step": i, "flops": i * 1e9, "train/loss": 5.0 - math.log(i) * (1.3 if kind != "single" else 1.0),
             "level": 0} for i in range(1, 50)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "summary.json").write_text(json.dumps({"run_kind": kind, "label": label, "seed": 0, "total_flops": 49e9}))
    return d


# Under a 6 GB address-space limit an attempt to build the huge model would fail loudly; the checks
# must stop the run before, in one line.
NO_ROOM = {"RLIMIT_AS": 6 * 2**30}


def processes_with(marker: str) -> list[int]:
    """Live processes (other than this one) whose environment holds `marker`: started by a test, still
    alive (psutil is no dependency: /proc)."""
    found = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() in (d / "environ").read_bytes() and int(d.name) != os.getpid():
                found.append(int(d.name))
        except OSError:
            continue
    return found


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


# ---------------------------------------------------------------------------------------------
# The commands the README and docs/ show

REPO = Path(__file__).resolve().parents[1]
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]  # the README and docs/*.md: what users read


def bash_blocks(path: Path) -> str:
    return "\n".join(re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S))


def documented_commands(program: str) -> list[tuple[str, list[str]]]:
    """(file, arguments) of each call of `program` in the bash blocks of the README and docs/*.md, but the
    calls with a plugin: they run from the plugin's own folder, where tests/e2e/test_plugin_runs.py runs them."""
    return [(path.relative_to(REPO).as_posix(), args) for path in DOC_FILES for args in shell_commands(bash_blocks(path), program)
            if not any(a.startswith("plugins=") for a in args)]


def doc_commands(program: str) -> list[list[str]]:
    """The arguments of each call of `program` shown in the README and docs/*.md."""
    return [args for _, args in documented_commands(program)]


def shell_calls(text: str) -> list[list[str]]:
    """The words of each command in shell text (continuations joined, comments and the scripts' $out
    variable left out, `a && b` as two commands), after any VAR=value assignments."""
    calls = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.split("#")[0].strip() if line.lstrip().startswith("#") else line.split("  #")[0].strip()
        for part in line.split("&&"):
            words = shlex.split(part.replace("$out", "out"))
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
                words = words[1:]  # an environment assignment before the command
            if words:
                calls.append(words)
    return calls


def shell_commands(text: str, program: str) -> list[list[str]]:
    """The arguments of each call of `program` in shell text: `program ...` after any VAR=value
    assignments, and for mltrain also the module form under a launcher (`torchrun ... -m mltrain.cli ...`,
    `srun python -m mltrain.cli ...`)."""
    commands = []
    for words in shell_calls(text):
        if Path(words[0]).name == program:
            commands.append(words[1:])
        elif program == "mltrain" and "mltrain.cli" in words:
            commands.append(words[words.index("mltrain.cli") + 1:])
    return commands


# The tools as a user runs them: the installed console scripts, from outside the repository (a temporary
# folder as the working directory), judged by the exit status, the one error line, no traceback, and
# the files outside the run or study left as they were.
TOOL_BIN = Path(sys.executable).parent  # the venv's console scripts (mltrain, mltrain-study, ...)
VICTIM = b"a file outside the study: nobody's to change\n" * 100
TOOL_SMOKE = ["scale=smoke", "train.progress=false", "device=cpu"]


def tool(name: str, *args: str, cwd: Path, env: Optional[dict] = None, timeout: float = 600,
         before: str = "") -> subprocess.CompletedProcess:
    """`<name> <args>` as the installed console script runs it, in `cwd`. `before`: Python run first in the
    same process (a fault to inject), then the script's own entry point."""
    script = TOOL_BIN / name
    if before:
        code = f"import runpy, sys\n{before}\nsys.argv = [{str(script)!r}, *sys.argv[1:]]\nrunpy.run_path({str(script)!r}, run_name='__main__')"
        cmd = [sys.executable, "-c", code, *args]
    else:
        cmd = [str(script), *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**ENV, **(env or {})},
                          errors="replace")


def from_a_terminal(cmd: list[str]) -> list[str]:
    """`cmd` started with SIGINT at its default, as a shell's foreground job is. A suite started as a
    background job of a non-interactive shell (`bash -c '... &'`, some CI runners) inherits SIGINT ignored,
    every process it starts does too, and Python then installs no Ctrl-C handler (rightly: such a job is
    meant to be immune to Ctrl-C), so a SIGINT sent to the tool would do nothing."""
    reset = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", reset, *cmd]


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """A folder `make(folder)` fills, made once for the whole suite and copied for this test process.

    Under `-n` every worker runs its own session, so a fixture of session or module scope is made once per
    worker that needs it; here the first one to need it makes it in the session's folder above every
    worker's own, under a file lock (the others wait on it), and each gets a copy (mtimes kept; tests may
    change their copy). A folder `make` did not finish is made again."""
    import shutil

    from filelock import FileLock  # a dependency of torch's

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    made, done = shared / "made_once" / name, shared / "made_once" / f"{name}.done"
    made.parent.mkdir(exist_ok=True)
    with FileLock(str(made.parent / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(made, ignore_errors=True)
            made.mkdir()
            make(made)
            done.touch()
    copy = tmp_path_factory.mktemp(name) / name
    shutil.copytree(made, copy, ignore=shutil.ignore_patterns(".mltrain.lock"))
    return copy


def made_smoke_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """The smoke study run once to the end by mltrain-study in a test process (once for the whole suite:
    made_once): (this process's copy of its dir, its exit status, its lines)."""
    def make(folder: Path) -> None:
        import mltrain.tools.compare as compare

        patch = pytest.MonkeyPatch()
        if not hasattr(compare, "compare_dirs"):
            patch.setattr(compare, "compare_dirs", standin_compare_dirs, raising=False)
        try:
            code, out, _ = run_main("study=smoke", f"dir={folder / 'study'}")
        finally:
            patch.undo()
        (folder / "result.json").write_text(json.dumps({"code": code, "out": out, "root": str(folder / "study")}))

    made = made_once(tmp_path_factory, "smoke_study", make)
    result = json.loads((made / "result.json").read_text())
    return made / "study", result["code"], result["out"]


def smoke_run(root: Path, name: str = "run") -> Path:
    """A finished smoke run in root/<name>, made by mltrain's console entry point in this process (tool_here)."""
    proc = tool_here("mltrain", *TOOL_SMOKE, f"hydra.run.dir={root / name}", cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root / name


def edited_copy(run: Path, dest: Path, name: str, change) -> Path:
    """A copy of the run folder `run` at `dest` whose JSON file `name` went through `change(data)`."""
    import shutil

    shutil.copytree(run, dest)
    data = json.loads((dest / name).read_text())
    change(data)
    (dest / name).write_text(json.dumps(data))
    return dest


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if ": error:" in line or ": interrupted:" in line]


def refused(proc: subprocess.CompletedProcess, needle: str, code: int = 2) -> str:
    """The one error line of a refused command (exit `code`, no traceback), which must hold `needle`."""
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    assert proc.returncode == code, (proc.returncode, out[-3000:])
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, out[-3000:]
    assert needle in lines[0], lines[0]
    return lines[0]


def victim(tmp: Path) -> Path:
    (tmp / "outside").mkdir(exist_ok=True)
    path = tmp / "outside" / "victim.txt"
    path.write_bytes(VICTIM)
    return path


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()} if path.exists() else {}


def fake_runs(root: Path, labels: tuple[str, str] = ("default", "coarsening=evenodd")) -> Path:
    """Two run folders mltrain-compare can read (a single-level and a multilevel one), under root/runs."""
    for name, kind, label, k in (("a", "single", labels[0], 1.0), ("b", "multilevel", labels[1], 1.3)):
        d = root / "runs" / name
        d.mkdir(parents=True)
        rows = [{"step": i, "flops": i * 1e9, "train/loss": 5.0 - k * math.log(i), "level": 0} for i in range(1, 50)]
        rows.append({"step": 49, "flops": 49e9, "val/loss": 5.0 - k * math.log(49)})
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (d / "summary.json").write_text(json.dumps({"run_kind": kind, "label": label, "seed": 0, "total_flops": 49e9,
                                                    "status": "finished"}))
    return root / "runs"


def batch_digest(x, y) -> str:
    """A short digest of a batch (x, y): shapes, dtypes and values, to pin batches bit for bit."""
    import hashlib

    h = hashlib.sha256()
    for t in (x, y):
        h.update(f"{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# The fault cases' one judge (tests/e2e/test_fault_classes.py and the robustness tests): a bad input or
# a fault a user meets ends in one clear line, exit 2 (130 for Ctrl-C), no traceback, earlier output
# unchanged; a case that must succeed exits 0 with no traceback and no error line.

JUDGED_WORDS = re.compile(r"error|traceback|exception|: interrupted:", re.IGNORECASE)


def judged_lines(text: str) -> list[str]:
    """The lines of `text` that read as an error (Hydra's HYDRA_FULL_ERROR hint is none)."""
    return [line for line in text.splitlines() if JUDGED_WORDS.search(line) and "HYDRA_FULL_ERROR" not in line]


def output_of(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes, but the run-dir lock (whoever claims the dir writes its
    pid there): the earlier output a handled fault leaves as it was."""
    return {k: v for k, v in tree(folder).items() if Path(k).name != LOCK_FILE}


def judge(proc: subprocess.CompletedProcess, needle: str = "", code: int = 2,
          kept: Optional[dict[Path, dict[str, bytes]]] = None) -> str:
    """Assert the fault case `proc` was handled: exit `code`, no traceback, exactly one error line on
    stderr (holding `needle`) and none on stdout, and every folder in `kept` holding the files it held
    before (`output_of(folder)` taken then). code=0: a case that must succeed, no error line at all. Returns
    the error line ("" for a success)."""
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    assert proc.returncode == code, (proc.returncode, out[-3000:])
    for folder, before in (kept or {}).items():
        assert output_of(folder) == before, f"{folder} changed"
    assert not judged_lines(proc.stdout), proc.stdout[-2000:]
    if code == 0:
        return ""
    lines = judged_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr[-3000:]
    assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ---------------------------------------------------------------------------------------------
# The tools run in the test's own process (the twins of cli, tool and run_tool, and multirun_here): the same
# entry point the console script runs, without paying a fresh process's imports (torch, dynamo, Hydra).

ENTRY_POINTS = {"mltrain": "train_main", "mltrain-prepare": "prepare_main", "mltrain-compare": "compare_main",
                "mltrain-sample": "sample_main", "mltrain-export": "export_main", "mltrain-study": "study_main"}
WATCHED_SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGHUP", "SIGALRM", "SIGCHLD", "SIGPIPE")


def _product_caches() -> dict[str, dict | list]:
    """The module-level state our code keeps for a process's life, by name, but mltrain.cli._checked (the
    config RunGuard checked for the task): emptied for an in-process run (a fresh process starts with
    them empty) and put back after it."""
    from mltrain import run as run_module
    from mltrain.data import loader
    from mltrain.runs import rundir, sweep

    return {"mltrain.runs.rundir._chosen": rundir._chosen, "mltrain.run._SWEPT": run_module._SWEPT,
            "mltrain.runs.sweep._failures": sweep._failures, "mltrain.data.loader._INSTALLED_LOADED": loader._INSTALLED_LOADED}


def _loggers() -> dict[str, tuple]:
    """Every logger (the root one included): its level, handlers, propagate and disabled flags."""
    import logging

    found = {"": logging.getLogger()}
    found.update((name, lg) for name, lg in logging.Logger.manager.loggerDict.items() if isinstance(lg, logging.Logger))
    return {name: (lg.level, tuple(lg.handlers), lg.propagate, lg.disabled) for name, lg in found.items()}


def _checked_state(known_modules: Iterable[str]) -> dict[str, object]:
    """What an in-process run must leave as it found it by itself (a library user calling it twice would
    see it too): every failure names its key. `known_modules`: those imported before the run."""
    import multiprocessing
    import threading
    import warnings

    from mltrain.config import register_configs as _register  # noqa: F401  (the registries below are loaded)
    from mltrain.method import coarsening, plugins, registry

    state: dict[str, object] = {f"signal handler {name}": signal.getsignal(getattr(signal, name)) for name in WATCHED_SIGNALS}
    state.update({
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled(),
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cudnn (allow_tf32, deterministic, benchmark)": (
            torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark),
        # (a warning filter for a class of a module imported since is that library's own, made at its import)
        "warnings.filters": [f for f in warnings.filters if getattr(f[2], "__module__", "builtins") in known_modules],
        "sys.path": list(sys.path),
        "sys.excepthook": sys.excepthook,
        "the depth methods registered (mltrain.method.registry._METHODS)": dict(registry._METHODS),
        "the coarsening schemes registered (mltrain.method.coarsening._SCHEMES)": dict(coarsening._SCHEMES),
        "the plugins loaded (mltrain.method.plugins._LOADED)": list(plugins._LOADED),
        # (a library's daemon thread, tqdm's monitor, ends by itself; ours are named mltrain-...)
        "threads alive": sorted(t.name for t in threading.enumerate() if not t.daemon or t.name.startswith("mltrain")),
        "child processes alive": sorted(p.pid for p in multiprocessing.active_children()),
    })
    return state


def in_process(name: str, args: list[str] | tuple[str, ...], cwd: Path, env: dict, argv0: str = "",
               entry: str = "") -> subprocess.CompletedProcess:
    """`name <args>` run in this process as its console script runs it (mltrain/console.py's entry point,
    or `entry` "module:function"), with sys.argv set, the working directory `cwd`, the environment
    exactly `env`, stdout and stderr captured, SystemExit turned into the return code (an exception
    that escapes: its traceback on stderr and 1, as Python does): the same fields as subprocess.run's.
    The twins below take their process twin's `timeout` so that a call site changes one name; nothing
    in this process can enforce it.

    The run starts as a fresh process would, and what a process's end discards is put back afterwards
    (`_as_a_fresh_process`): the working directory, sys.argv, os.environ (our code sets MLTRAIN_PLUGINS,
    the sweep's pid, CUDA_VISIBLE_DEVICES, the ranks' start time), sys.stdout/sys.stderr, torch's thread
    count (from OMP_NUM_THREADS, as a fresh process sets it), the warnings (Python's default filters and
    printer, so that a warning is on stderr as a process prints it, not in pytest's record), Hydra's
    singletons (GlobalHydra, HydraConfig, JobRuntime, the ConfigStore: their attributes) and OmegaConf's
    resolvers, logging (every logger's level, handlers, propagate and disabled flags, the handlers Hydra
    added closed: its log files; logging.raiseExceptions), the run-dir claims (mltrain.runs.rundir._held:
    released, as a process's end drops its flocks), the atexit handlers our code registers (run at the
    end, as at a process's exit: the empty folders of a refused run removed), and the module-level state
    our code keeps for a process's life (`_product_caches`: emptied for the run, then put back).

    What the run must put back by itself (a library user calling it twice would meet it too) is checked,
    and a difference fails the test naming it (`_checked_state`): the handlers of SIGINT, SIGTERM,
    SIGUSR1, SIGUSR2, SIGHUP, SIGALRM, SIGCHLD and SIGPIPE, torch's default dtype, deterministic
    algorithms, grad mode, float32 matmul precision, TF32 and cuDNN flags, the warning filters it added,
    sys.path, sys.excepthook, the registered depth methods, coarsening schemes and plugins, the threads
    alive (not a library's daemon thread) and the child processes. Left as they are: the caches of pure
    functions (functools.lru_cache: the code's digest, the machine id, the CPU, the shipped corpora, the
    study's plans; compare's type hints), and what only a joblib worker or a tokenizing pool worker sets
    (mltrain.training.devices' GPU claim, mltrain.data.tokenizers' worker tokenizer). A test that needs
    a process of its own keeps one (docs/testing.md says which)."""
    import importlib
    import traceback
    import warnings

    import mltrain.console  # noqa: F401  (imported before the state is taken: imports are no leak)
    import mltrain.run  # noqa: F401

    module, _, function = (entry or f"mltrain.console:{ENTRY_POINTS[name]}").partition(":")
    main = getattr(importlib.import_module(module), function)
    known_modules = {*sys.modules, "builtins"}
    checked = _checked_state(known_modules)
    code: int | str | None = 0
    with _as_a_fresh_process(env, cwd, [argv0 or name, *args]) as (out, err):
        filters = _checked_state(known_modules)["warnings.filters"]
        try:
            main()
        except SystemExit as end:
            code = end.code
        except BaseException:  # noqa: BLE001 - as Python's own top level: the traceback, status 1
            traceback.print_exc()
            code = 1
        if code is not None and not isinstance(code, int):
            print(code, file=err)
            code = 1
        added = _checked_state(known_modules)["warnings.filters"] != filters
    left = _checked_state(known_modules)
    changed = {key: f"{checked[key]!r} -> {left[key]!r}"[:600] for key in checked if left[key] != checked[key]}
    if added:
        changed["warnings.filters"] = f"{filters!r} -> {warnings.filters!r}"[:600]
    assert not changed, f"`{name} {' '.join(args)}` run in this process left these changed: {changed}"
    return subprocess.CompletedProcess([argv0 or name, *args], code or 0, out.getvalue(), err.getvalue())


# Python's own warning filters at start-up (no -W, no PYTHONWARNINGS), last one first.
PYTHON_WARNINGS = (("ignore", ResourceWarning, ""), ("ignore", ImportWarning, ""),
                   ("ignore", PendingDeprecationWarning, ""), ("ignore", DeprecationWarning, ""),
                   ("default", DeprecationWarning, "__main__"))


@contextlib.contextmanager
def _as_a_fresh_process(env: dict, cwd: Path, argv: list[str]) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """In the block: what a fresh process `argv` in `cwd` with `env` starts with; after it, this process
    as it was (see in_process). Yields the block's (stdout, stderr)."""
    import atexit
    import logging
    import warnings

    out, err = io.StringIO(), io.StringIO()
    saved = (os.getcwd(), sys.argv, dict(os.environ), sys.stdout, sys.stderr, torch.get_num_threads(),
             logging.raiseExceptions, _loggers())
    exits: list[tuple] = []
    register = atexit.register
    with _hydra_put_back(), _product_caches_emptied(), warnings.catch_warnings():
        try:
            warnings.resetwarnings()
            for action, category, module in PYTHON_WARNINGS:
                warnings.filterwarnings(action, category=category, module=module)
            warnings.showwarning = warnings._showwarning_orig  # type: ignore[attr-defined]
            warnings._showwarnmsg_impl = _print_warning  # type: ignore[attr-defined]  (pytest records them)
            os.environ.clear()
            os.environ.update(env)
            threads = env.get("OMP_NUM_THREADS", "").strip()
            torch.set_num_threads(int(threads) if threads.isdigit() and int(threads) > 0 else saved[5])
            os.chdir(cwd)
            sys.argv = argv
            sys.stdout, sys.stderr = out, err
            atexit.register = lambda f, *a, **k: exits.append((f, a, k)) or f  # type: ignore[assignment]
            yield out, err
        finally:
            atexit.register = register  # type: ignore[assignment]
            for f, a, k in exits:
                f(*a, **k)
            os.chdir(saved[0])
            sys.argv, sys.stdout, sys.stderr = saved[1], saved[3], saved[4]
            os.environ.clear()
            os.environ.update(saved[2])
            torch.set_num_threads(saved[5])
            logging.raiseExceptions = saved[6]
            _put_back_loggers(saved[7])


def _print_warning(message) -> None:
    """A warning as Python prints it (warnings._showwarnmsg_impl): on the stderr of the moment."""
    import warnings

    if sys.stderr is not None:
        with contextlib.suppress(OSError):
            sys.stderr.write(warnings._formatwarnmsg(message))  # type: ignore[attr-defined]


@contextlib.contextmanager
def _hydra_put_back() -> Iterator[None]:
    """Hydra's singletons (their attributes) and OmegaConf's resolvers as they were, after the block."""
    from hydra.core.singleton import Singleton
    from omegaconf.basecontainer import BaseContainer

    instances = {cls: (inst, dict(vars(inst))) for cls, inst in Singleton._instances.items()}
    resolvers = dict(BaseContainer._resolvers)
    try:
        yield
    finally:
        Singleton._instances.clear()
        for cls, (inst, attributes) in instances.items():
            Singleton._instances[cls] = inst
            vars(inst).clear()
            vars(inst).update(attributes)
        BaseContainer._resolvers = resolvers


@contextlib.contextmanager
def _product_caches_emptied() -> Iterator[None]:
    """Our module-level state (`_product_caches`) empty in the block, as in a fresh process; the run-dir
    claims made in it released (a process's end drops its flocks); then all of it as it was."""
    from mltrain import cli as cli_module
    from mltrain.runs import rundir

    caches = _product_caches()
    saved = {key: copy.copy(cache) for key, cache in caches.items()}
    held, checked = dict(rundir._held), cli_module._checked
    for cache in caches.values():
        cache.clear()
    cli_module._checked = None
    try:
        yield
    finally:
        for key in set(rundir._held) - set(held):
            rundir._held.pop(key)[0].close()
        for key, cache in caches.items():
            cache.clear()
            cache.update(saved[key]) if isinstance(cache, dict) else cache.extend(saved[key])  # type: ignore[union-attr]
        cli_module._checked = checked


def _put_back_loggers(saved: dict[str, tuple]) -> None:
    import logging

    kept = {h for entry in saved.values() for h in entry[1]}
    for name, now in _loggers().items():
        for handler in now[1]:
            if handler not in kept:
                handler.close()  # Hydra's log file: closed, as at a process's end
        lg = logging.getLogger(name or None)
        level, handlers, propagate, disabled = saved.get(name, (logging.NOTSET, (), True, False))
        lg.setLevel(level)
        lg.handlers[:] = list(handlers)
        lg.propagate, lg.disabled = propagate, disabled


def cli_here(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """`cli(args, cwd)` in this process (`in_process`): `python -m mltrain.cli` as the entry point."""
    return in_process("mltrain", args, cwd, ENV, argv0=str(REPO / "mltrain" / "cli.py"), entry="mltrain.cli:train_main")


def tool_here(name: str, *args: str, cwd: Path, env: Optional[dict] = None,
              timeout: float = 600) -> subprocess.CompletedProcess:
    """`tool(name, *args, cwd=..., env=...)` in this process (`in_process`; no `before`: a fault injected
    into the process needs one of its own)."""
    return in_process(name, args, cwd, {**ENV, **(env or {})}, argv0=str(TOOL_BIN / name))


def run_tool_here(name: str, *args: str, cwd: Path, env: dict | None = None,
                  timeout: int = 300) -> subprocess.CompletedProcess:
    """`run_tool(name, *args, cwd=..., env=...)` without limits, in this process (`in_process`)."""
    entry = "mltrain.cli:train_main" if name == "mltrain" else f"mltrain.console:{ENTRY_POINTS[name]}"
    return in_process(name, args, cwd, {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, entry=entry)


def multirun_here(tmp_path, *args):
    """`python -m mltrain.cli -m <SMOKE> <args>` into tmp_path/sweep, which it returns, in this process
    (`in_process`; was `multirun`, a process of its own): for Hydra's basic launcher only (the joblib
    one starts a process per worker; tests/e2e/test_parallel_sweeps.py starts it as a user does)."""
    sweep = tmp_path / "sweep"
    proc = in_process("mltrain", ["-m", *SMOKE, *args, f"hydra.sweep.dir={sweep}"], tmp_path,
                      {**os.environ, "PYTHONUNBUFFERED": "1"}, argv0=str(REPO / "mltrain" / "cli.py"),
                      entry="mltrain.cli:train_main")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sweep
