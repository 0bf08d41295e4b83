"""The helpers of scripts/gpu_lease.sh, in Python without torch (each call starts in well under a second):

    python scripts/gpu_lease.py install WHEELS SITE     # install from WHEELS only what fails to import
    python scripts/gpu_lease.py report WORK DEST ...     # WORK's parts -> DEST/gpu_check.json + logs.tar.gz

`install` looks for every package `mltrain scale=smoke` needs (NEEDED) and installs, from the wheels in
WHEELS, only those that are not there, with `pip --no-index --no-deps --target SITE` (nothing is
downloaded, the machine's own torch is never touched); a missing package without a wheel is one line.
`report` reads what the parts left in WORK and writes the two files the lease brings back (rewritten after
every part, so a command cut off from outside still leaves the parts before it).
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterable, Optional

# The import name of every package a run needs -> its distribution (the name its wheel starts with).
NEEDED = {"torch": "torch", "numpy": "numpy", "yaml": "pyyaml", "packaging": "packaging", "tqdm": "tqdm",
          "safetensors": "safetensors", "antlr4": "antlr4-python3-runtime", "omegaconf": "omegaconf",
          "hydra": "hydra-core"}
LOG_TAIL = 2 * 2**20  # bytes of each log kept in logs.tar.gz (its end: where a failure is)
KEEP = (".out", ".err", ".json", ".jsonl", ".log", ".xml", ".tsv", ".yaml", ".txt")
SKIP_DIRS = {"cache", "inductor", "site", "tiktoken", "checkpoints", "triton"}
LIMITS = {"files": 8, "file_bytes": 16 * 2**20, "depth": 2}  # what comes back from the lease's output folder
PARTS = ("device", "bench", "paper", "syncs", "cuda_tests", "smoke")


def failing(modules: Iterable[str] = NEEDED) -> list[str]:
    """The modules of `modules` that are not importable here (found without running them)."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _dist(wheel: Path) -> str:
    return re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()


def wheels_for(modules: Iterable[str], folder: Path) -> tuple[list[Path], list[str]]:
    """(the wheels in `folder` that provide `modules`, the modules none provides)."""
    have = {_dist(w): w for w in sorted(folder.glob("*.whl"))} if folder.is_dir() else {}
    found, lacking = [], []
    for module in modules:
        wheel = have.get(NEEDED[module])
        (found.append(wheel) if wheel else lacking.append(module))
    return found, lacking


def install(wheels_dir: Path, site: Path) -> int:
    """Install the wheels of what fails to import; 0, or 1 after one line saying what cannot be had."""
    missing = failing()
    if not missing:
        return 0
    wheels, lacking = wheels_for(missing, wheels_dir)
    if lacking:
        names = ", ".join(NEEDED[m] for m in lacking)
        print(f"gpu_lease: {names} not importable and no wheel of it in {wheels_dir} (bash scripts/gpu_wheels.sh, "
              f"where the package index is reachable, fetches them; the folder must travel with the checkout)",
              file=sys.stderr)
        return 1
    print(f"gpu_lease: installing {', '.join(w.name for w in wheels)} into {site}", file=sys.stderr)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
           "--disable-pip-version-check", "--target", str(site), *map(str, wheels)]
    if subprocess.run(cmd, stdout=sys.stderr).returncode:
        print(f"gpu_lease: installing the wheels of {wheels_dir} failed", file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------------------------------------
# report


def read_parts(work: Path) -> dict:
    """Every part's record from WORK/parts.tsv: started-and-ended, not run (with why), skipped (left out by
    --parts), or started and never ended (the command was cut off from outside)."""
    parts: dict = {}
    path = work / "parts.tsv"
    for line in path.read_text().splitlines() if path.exists() else []:
        name, what, *rest = line.split("\t")
        if what == "start":
            parts[name] = {"status": "cut_off", "limit_s": int(rest[0]),
                           "reason": "the command was stopped from outside while this part ran"}
        elif what in ("not_run", "skipped"):
            parts[name] = {"status": what, "limit_s": int(rest[0]), "seconds": 0, "reason": rest[1]}
        else:  # end RC SECONDS
            rc, seconds = int(rest[0]), int(rest[1])
            status = "ok" if rc == 0 else "timed_out" if rc in (124, 137) else "failed"
            parts[name] = {**parts.get(name, {}), "status": status, "rc": rc, "seconds": seconds}
            parts[name].pop("reason", None)
        if name in parts and parts[name]["status"] not in ("not_run", "skipped"):
            parts[name]["graphs"] = graphs_in(work / f"{name}.err")
    return parts


def graphs_in(log: Path) -> int:
    """Graphs dynamo compiled in a part, counted from its log (TORCH_LOGS=dynamo logs each one its backend compiled)."""
    try:
        return log.read_text(errors="replace").count("Step 2: done compiler function")
    except OSError:
        return 0


def read_json(path: Path, last_line: bool = False) -> Optional[object]:
    try:
        text = path.read_text().strip()
        return json.loads(text.splitlines()[-1] if last_line else text)
    except (OSError, ValueError, IndexError):
        return None


def metric_rows(run_dir: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    except (OSError, ValueError):
        return []


def run_record(summary: Optional[dict], run_dir: Path) -> Optional[dict]:
    """A run's summary figures, its validation curve and (at most about 60 of) its train rows."""
    if summary is None:
        return None
    rows = metric_rows(run_dir)
    keep = ("status", "compiled", "fine_steps", "coarse_steps", "total_flops", "initial_val_loss", "final_val_loss",
            "final_train_loss", "wall_time_s", "train_time_s", "tokens_per_s", "peak_memory_bytes", "mfu_by_level",
            "peak_flops", "world_size", "device")
    return {**{k: summary.get(k) for k in keep},
            "val_curve": [[x["step"], x["flops"], x["val/loss"]] for x in rows if "val/loss" in x],
            "train_rows": [[x["step"], x["level"], x["train/loss"], x.get("mfu"), bool(x.get("compiled_in_row"))]
                           for x in rows if "train/loss" in x][:: max(1, len(rows) // 60)]}


def cuda_tests(work: Path, dry: bool, problems: list[str]) -> Optional[dict]:
    if not (work / "cuda_tests.xml").exists():
        return None
    suite = ET.parse(work / "cuda_tests.xml").getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    tests = {"passed": n["tests"] - n["failures"] - n["errors"] - n["skipped"], "failed": n["failures"] + n["errors"],
             "skipped": n["skipped"]}
    if not dry and (tests["skipped"] or not tests["passed"]):
        problems.append(f"cuda_tests: {tests['skipped']} skipped, {tests['passed']} passed (none may be skipped)")
    return tests


def syncs(work: Path, problems: list[str]) -> Optional[dict]:
    got = read_json(work / "syncs.json")
    if got is None:
        return None
    problems += [f"syncs: {p}" for p in got["problems"]]
    keys = ("steps", "counting_from_step", "graphs", "compiled", "conversions", "cuda_syncs", "rows")
    return {"problems": got["problems"], "methods": {name: {k: m.get(k) for k in keys}
                                                    for name, m in got["methods"].items()}}


def bench(work: Path, dry: bool, problems: list[str]) -> Optional[dict]:
    got = read_json(work / "bench.out")
    if got is None:
        return None
    steps = got["steps"]
    out = {"config": got["config"], "compile": got.get("compile"), "ratios": got["ratios"], "runs": got["runs"],
           **{kind: {k: steps[kind][k] for k in ("ms_per_step", "tokens_per_s", "mfu", "peak_memory_bytes")}
              for kind in ("fine_single", "fine_multilevel", "coarse", "plain_fine", "fine_padded", "fine_chunked")
              if kind in steps}}
    if out["compile"] is None or out["compile"]["recompiles_after_warmup"] != 0:
        problems.append(f"bench: recompiled after the warm-up ({out['compile']})")
    if not dry and not all(out[k]["mfu"] for k in ("fine_single", "coarse")):
        problems.append("bench: no MFU (the card is not in the peak table: rerun with GPU_CHECK_PEAK_FLOPS=<its bf16 "
                        "FLOP/s>)")
    return out


def paper(work: Path, tokens: str, problems: list[str]) -> Optional[dict]:
    got = read_json(work / "paper.out", last_line=True)
    if got is None:
        return None
    ml, sl = (run_record(got[k], work / f"paper_{k}") for k in ("multilevel", "single"))
    out = {"tokenizer": tokens, "multilevel": ml, "single": sl,
           "flop_saving": 1 - ml["total_flops"] / sl["total_flops"],
           "wall_clock_saving": 1 - ml["train_time_s"] / sl["train_time_s"],
           "final_val_loss_gain": sl["final_val_loss"] - ml["final_val_loss"]}
    for name in ("multilevel", "single"):
        if out[name]["status"] != "finished" or not out[name]["compiled"]:
            problems.append(f"paper: the {name} run did not finish compiled")
    return out


def smoke(work: Path, ran: bool, problems: list[str]) -> Optional[dict]:
    out = run_record(read_json(work / "smoke" / "summary.json"), work / "smoke")
    if out is not None:
        out["data_parallel"] = out["world_size"] > 1
        if not out["data_parallel"]:
            out["note"] = "one GPU: one process (NCCL needs a GPU per rank), so no data parallel"
    elif ran:
        problems.append("smoke: no summary.json")
    return out


def first_results(result: dict) -> dict:
    """What the first GPU is to tell, in one place: step speed and MFU at gpt22m, memory, recompiles, the
    paper run against its single-level run of equal FLOPs, mltrain's step against a bare loop's."""
    b, p = result["bench"] or {}, result["paper"] or {}

    def pick(kind: str) -> dict | None:
        return {k: b[kind][k] for k in ("ms_per_step", "mfu", "peak_memory_bytes")} if kind in b else None

    return {"fine_step": pick("fine_single"), "coarse_step": pick("coarse"), "plain_loop_step": pick("plain_fine"),
            "padded_vocab_step": pick("fine_padded"), "chunked_loss_step": pick("fine_chunked"),
            "plain_loop_ratio": b.get("ratios"), "recompiles_after_warmup": (b.get("compile") or {}).get(
                "recompiles_after_warmup"),
            "paper_vs_single": {k: p.get(k) for k in ("flop_saving", "wall_clock_saving", "final_val_loss_gain")}
            if p else None}


def outputs_within_limits(dest: Path) -> list[str]:
    """What in `dest` would not come back: too many files, one too large, too deep, an odd name."""
    files = sorted(f for f in dest.rglob("*") if f.is_file() or f.is_symlink())
    out = [f"{len(files)} files, at most {LIMITS['files']} come back"] if len(files) > LIMITS["files"] else []
    for f in files:
        rel = f.relative_to(dest)
        if len(rel.parts) - 1 > LIMITS["depth"]:
            out.append(f"{rel}: more than {LIMITS['depth']} folders down")
        if f.stat().st_size > LIMITS["file_bytes"]:
            out.append(f"{rel}: {f.stat().st_size} bytes, over {LIMITS['file_bytes']}")
        if not all(re.fullmatch(r"[A-Za-z0-9._-]+", part) for part in rel.parts):
            out.append(f"{rel}: a name of other characters than letters, digits, '.', '_', '-'")
    return out


def pack(work: Path, tar_path: Path) -> None:
    """Every log, metrics file and JSON the parts left in WORK (each cut to its last LOG_TAIL bytes) into
    one tar.gz, written aside and renamed into place."""
    tmp = tar_path.with_name(tar_path.name + ".part")
    with tarfile.open(tmp, "w:gz") as tar:
        for f in sorted(work.rglob("*")):
            rel = f.relative_to(work)
            if not f.is_file() or f.is_symlink() or f.suffix not in KEEP or SKIP_DIRS & set(rel.parts[:-1]):
                continue
            data = f.read_bytes()[-LOG_TAIL:]
            info = tarfile.TarInfo(str(rel))
            info.size, info.mtime = len(data), int(f.stat().st_mtime)
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(tar_path)


def report(work: Path, dest: Path, dry: bool, tokens: str, deadline: int, elapsed: int, mode: str) -> int:
    parts = read_parts(work)
    problems = [f"{n}: {p['status'].replace('_', ' ')}" + (f" ({p['reason']})" if p.get("reason") else "") +
                (f" after {p['limit_s']} s" if p["status"] == "timed_out" else "")
                for n, p in parts.items() if p["status"] not in ("ok", "skipped")]  # skipped: asked for
    problems += [f"{n}: not reached" for n in PARTS if n not in parts]
    if not any(p["status"] == "ok" for p in parts.values()):  # every part skipped or none recorded: not a pass
        problems.append("nothing was measured: no part ran and passed")
    result = {"mode": mode, "ok": False, "problems": problems, "deadline_s": deadline, "elapsed_s": elapsed,
              "parts": parts, "seconds": sum(p.get("seconds", 0) for p in parts.values()),
              "device": read_json(work / "device.out", last_line=True),
              "cuda_tests": cuda_tests(work, dry, problems), "syncs": syncs(work, problems),
              "bench": bench(work, dry, problems), "paper": paper(work, tokens, problems),
              "smoke": smoke(work, "smoke" in parts and parts["smoke"]["status"] == "ok", problems)}
    result["first_results"] = first_results(result)
    result["ok"], result["outputs_beyond_limits"] = not problems, []
    dest.mkdir(parents=True, exist_ok=True)
    pack(work, dest / "logs.tar.gz")
    write_json(dest / "gpu_check.json", result)
    result["outputs_beyond_limits"] = outputs_within_limits(dest)  # with both files in place
    if result["outputs_beyond_limits"]:
        result["ok"] = False
        write_json(dest / "gpu_check.json", result)
    return 0 if result["ok"] else 1


def write_json(path: Path, value: dict) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(value, indent=2))
    tmp.replace(path)


def main(argv: list[str]) -> int:
    if argv[:1] == ["install"] and len(argv) == 3:
        return install(Path(argv[1]), Path(argv[2]))
    if argv[:1] == ["report"] and len(argv) == 8:
        work, dest, dry, tokens, deadline, elapsed, mode = argv[1:]
        return report(Path(work), Path(dest), dry == "1", tokens, int(deadline), int(elapsed), mode)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
