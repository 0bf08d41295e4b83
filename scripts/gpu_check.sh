#!/usr/bin/env bash
# The GPU check: one call, on one GPU, in under 10 minutes with the machine's start (each part under its
# own `timeout`), ending in one JSON on stdout (progress and the parts' logs go to stderr and $OUT). It
# exits 1 when CUDA is unavailable, when any CUDA test is skipped, or when any part fails or times out:
#
#   device      torch, CUDA, the card and the peak MFU is measured against (training/devices.py)
#   cuda_tests  pytest -m cuda: none may be skipped
#   syncs       scripts/syncs.py over 200 steady-state steps of every method, compiled: no host sync in
#               the step (torch.cuda.set_sync_debug_mode and mltrain's own tensor reads), one per row
#   bench       scripts/bench.py --model gpt22m --compile: fine and coarse ms/step and MFU, peak memory,
#               no recompile after the warm-up
#   paper       a 300-step compiled multilevel run at the paper's shape (gpt22m, 64 x 256 tokens, warm-up
#               shorter than the run) beside the single-level run of as many FLOPs: both loss curves, MFU
#               rows, the wall-clock saving beside the FLOP saving
#   smoke       a 50-step compiled multilevel run under torchrun (NCCL, one process per GPU)
#
#   bash scripts/gpu_check.sh             # on a machine with a CUDA GPU
#   bash scripts/gpu_check.sh --dry-run   # the same pipeline, tiny, on the CPU (tests/e2e/test_gpu_check_script.py)
#
# It uses the machine's own Python and CUDA torch (python3, or $PYTHON), never a torch of its own. GPU
# images often lack hydra-core, omegaconf and antlr4: `bash scripts/gpu_wheels.sh`, run where the package
# index is reachable, puts their wheels in .gpu-wheels/, which this installs with `pip --no-index
# --no-deps` into a folder of its own. Each part's limit is GPU_CHECK_TIMEOUT_<PART> seconds (defaults
# below). The paper's model uses the GPT-2 tokenizer; offline, tiktoken finds its files through
# TIKTOKEN_CACHE_DIR, or in shared/fixtures/gpt2-bpe (beside or inside the checkout). Without them the
# runs use byte tokens with the vocabulary padded to 50257 (same model, same cost) and say so.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: $0 [--dry-run]" >&2; exit 2 ;;
esac
if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ $DRY = 1 ] && [ -x "$ROOT/.venv/bin/python" ]; then
  PY=$ROOT/.venv/bin/python
else
  PY=python3  # the machine's own, with its CUDA torch
fi
OUT=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
export MLTRAIN_CACHE=${MLTRAIN_CACHE:-$OUT/cache}
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$OUT/inductor}  # the parts share compiled kernels
say() { echo "gpu_check: $*" >&2; }

# The packages the image lacks, from carried wheels; mltrain itself from this checkout.
WHEELS=${GPU_WHEELS:-$ROOT/.gpu-wheels}
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --target "$OUT/site" \
    "$WHEELS"/*.whl >&2 || { say "installing the wheels of $WHEELS failed"; exit 1; }
  export PYTHONPATH=$OUT/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
LINKED_CONF=0
if ! "$PY" -c "import mltrain.conf" 2>/dev/null && [ ! -e "$ROOT/mltrain/conf" ]; then
  ln -s ../conf "$ROOT/mltrain/conf" && LINKED_CONF=1  # the package's conf/ as an install maps it
fi
trap '[ $LINKED_CONF = 1 ] && rm -f "$ROOT/mltrain/conf"' EXIT

if [ $DRY = 0 ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check: no CUDA device ($("$PY" -c "import torch; print('torch', torch.__version__)" 2>/dev/null \
    || echo "no torch") in $PY; --dry-run runs the same pipeline tiny on the CPU)" >&2
  exit 1
fi

tokenizer=gpt2
if [ -z "${TIKTOKEN_CACHE_DIR:-}" ]; then
  for dir in "$ROOT/../shared/fixtures/gpt2-bpe" "$ROOT/shared/fixtures/gpt2-bpe"; do
    if [ -f "$dir/encoder.json" ] && [ -f "$dir/vocab.bpe" ]; then
      # tiktoken's cache names are the sha1 of each file's download URL (see shared/fixtures/README.md)
      mkdir -p "$OUT/tiktoken"
      cp "$dir/encoder.json" "$OUT/tiktoken/6c7ea1a7e38e3a7f062df639a5b80947f075ffe6"
      cp "$dir/vocab.bpe" "$OUT/tiktoken/6d1cbeee0f20b3d9449abfede4726ed8212e3aee"
      export TIKTOKEN_CACHE_DIR=$OUT/tiktoken
      break
    fi
  done
  [ -n "${TIKTOKEN_CACHE_DIR:-}" ] || tokenizer=bytes
fi

if [ $DRY = 1 ]; then
  # dynamo traces and counts graphs as on the GPU; its eager backend skips the AOT compile, which only a GPU pays back
  export OMP_NUM_THREADS=1 MLTRAIN_COMPILE_BACKEND=${MLTRAIN_COMPILE_BACKEND:-eager}
  DEVICE=cpu NPROC=2 SYNC_STEPS=48 TOKENS=bytes
  SYNC_METHODS=(single multilevel layer_drop skip)
  BENCH=(--model tiny --device cpu --threads 1 --compile --steps 10 --repeats 1 --run-repeats 1 --cycles 1
         --coarse-steps 10 --after 10)
  PAPER=(scale=cpu model.n_layer=4 train.max_steps=30 schedule.warmup_steps=3 multilevel.n_cycles=3
         multilevel.coarse_steps=4 train.eval_interval=10 train.eval_batches=2)
  SMOKE=(scale=smoke train.max_steps=10)
  default_timeouts=(device=60 cuda_tests=300 syncs=300 bench=400 paper=300 smoke=300)
else
  DEVICE=cuda SYNC_STEPS=200 TOKENS=$tokenizer
  NPROC=$("$PY" -c "import torch; print(torch.cuda.device_count())")
  SYNC_METHODS=()
  BENCH=(--model gpt22m --batch 64 --device cuda --compile --steps 20 --repeats 5 --run-repeats 1 --cycles 1
         --coarse-steps 10 --after 10)
  # the paper's shape and schedule, shortened: warm-up 5% (the paper's 715 of 16,000), cycles in the first
  # steps with about as many coarse steps per fine step as the paper's 35 x 2 x 100 in 16,000
  PAPER=(scale=paper data=embedded train.max_steps=300 schedule.warmup_steps=15 multilevel.n_cycles=7
         multilevel.coarse_steps=10 train.eval_interval=50 train.eval_batches=10)
  [ "$tokenizer" = bytes ] && PAPER+=(data.tokenizer=bytes model.vocab_size=50257)
  SMOKE=(scale=smoke train.max_steps=50)
  default_timeouts=(device=30 cuda_tests=120 syncs=75 bench=120 paper=100 smoke=60)
fi

# A card the peak table (mltrain/training/devices.py) lacks: GPU_CHECK_PEAK_FLOPS=<its bf16 FLOP/s>
if [ -n "${GPU_CHECK_PEAK_FLOPS:-}" ]; then
  BENCH+=(--peak-flops "$GPU_CHECK_PEAK_FLOPS")
  PAPER+=("train.peak_flops=$GPU_CHECK_PEAK_FLOPS")
  SMOKE+=("train.peak_flops=$GPU_CHECK_PEAK_FLOPS")
fi

limit() {  # the part's time limit: GPU_CHECK_TIMEOUT_<PART>, else the default above
  local name=$1 var="GPU_CHECK_TIMEOUT_${1^^}" pair
  if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
  for pair in "${default_timeouts[@]}"; do [ "${pair%%=*}" = "$name" ] && echo "${pair#*=}"; done
}

# part NAME COMMAND...: run it under its own timeout; stdout to $OUT/NAME.out, stderr to $OUT/NAME.err
# (and ours); its status, seconds and limit to $OUT/parts.tsv (124: timed out).
part() {
  local name=$1 seconds start rc
  shift
  seconds=$(limit "$name")
  say "$name (at most ${seconds} s): $*"
  start=$(date +%s)
  timeout --kill-after=10 "$seconds" "$@" > "$OUT/$name.out" 2> >(tee "$OUT/$name.err" >&2)
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - start ))" "$seconds" >> "$OUT/parts.tsv"
}

part device "$PY" - "$DEVICE" <<'EOF'
import json, os, subprocess, sys
import torch
from mltrain.training.devices import peak_flops
device = torch.device(sys.argv[1])
out = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
       "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
       "device_count": torch.cuda.device_count(), "peak_flops": peak_flops(device),
       "capability": list(torch.cuda.get_device_capability(device)) if device.type == "cuda" else None}
try:
    out["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                        "--format=csv,noheader"], capture_output=True, text=True,
                                       timeout=20).stdout.strip()
except (OSError, subprocess.SubprocessError):
    out["nvidia_smi"] = None
print(json.dumps(out))
EOF

part cuda_tests "$PY" -m pytest -q -rs -m cuda -p no:cacheprovider --junitxml="$OUT/cuda_tests.xml" tests

part syncs "$PY" scripts/syncs.py "$OUT/syncs.json" --device "$DEVICE" --steps "$SYNC_STEPS" "${SYNC_METHODS[@]}"

part bench "$PY" scripts/bench.py "${BENCH[@]}"

# The multilevel run, then the single-level run of as many FLOPs (its own schedule ending there).
part paper "$PY" - "$OUT" "$DEVICE" "${PAPER[@]}" <<'EOF'
import json, subprocess, sys
from pathlib import Path
out, device, common = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
base = [*common, f"device={device}", "train.compile=true", "train.progress=false", "train.checkpoint_interval=0"]


def train(name, *overrides):
    run_dir = out / name
    subprocess.run([sys.executable, "-m", "mltrain.cli", *base, *overrides, f"hydra.run.dir={run_dir}"], check=True,
                   stdout=sys.stderr)
    return json.loads((run_dir / "summary.json").read_text())


ml = train("paper_multilevel", "experiment=multilevel")
single = train("paper_single", "experiment=single", f"train.max_steps={round(ml['fine_equivalent_steps'])}")
print(json.dumps({"multilevel": ml, "single": single}))
EOF

part smoke "$PY" -m torch.distributed.run --standalone "--nproc_per_node=$NPROC" -m mltrain.cli experiment=multilevel \
  "${SMOKE[@]}" "device=$DEVICE" train.compile=true train.progress=false "hydra.run.dir=$OUT/smoke"

"$PY" - "$OUT" "$DRY" "$TOKENS" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
from pathlib import Path

out, dry, tokens = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]
parts = {}
for line in (out / "parts.tsv").read_text().splitlines():
    name, rc, seconds, limit = line.split("\t")
    parts[name] = {"rc": int(rc), "seconds": int(seconds), "limit_s": int(limit), "timed_out": int(rc) in (124, 137)}
problems = [f"{n}: timed out after {p['limit_s']} s" if p["timed_out"] else f"{n}: exit status {p['rc']}"
            for n, p in parts.items() if p["rc"]]


def read_json(path):
    try:
        return json.loads(Path(path).read_text().strip().splitlines()[-1] if path.suffix == ".out" else
                          Path(path).read_text())
    except (OSError, ValueError, IndexError):
        return None


def rows(run_dir):
    try:
        return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    except (OSError, ValueError):
        return []


device = read_json(out / "device.out")

tests = None
if (out / "cuda_tests.xml").exists():
    suite = ET.parse(out / "cuda_tests.xml").getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    tests = {"passed": n["tests"] - n["failures"] - n["errors"] - n["skipped"], "failed": n["failures"] + n["errors"],
             "skipped": n["skipped"]}
    if not dry and (tests["skipped"] or not tests["passed"]):
        problems.append(f"cuda_tests: {tests['skipped']} skipped, {tests['passed']} passed (none may be skipped)")

syncs = read_json(out / "syncs.json")
if syncs is not None:
    problems += [f"syncs: {p}" for p in syncs["problems"]]
    syncs = {"problems": syncs["problems"], "methods": {
        name: {k: m[k] for k in ("steps", "compiled", "conversions", "cuda_syncs", "rows")}
        for name, m in syncs["methods"].items()}}

bench = None
if (out / "bench.out").exists():
    try:
        bench = json.loads((out / "bench.out").read_text())
    except ValueError:
        pass
if bench is not None:
    steps = bench["steps"]
    bench = {"config": bench["config"], "compile": bench.get("compile"), "ratios": bench["ratios"], "runs": bench["runs"],
             **{kind: {k: steps[kind][k] for k in ("ms_per_step", "tokens_per_s", "mfu", "peak_memory_bytes")}
                for kind in ("fine_single", "fine_multilevel", "coarse", "plain_fine")}}
    if bench["compile"] is None or bench["compile"]["recompiles_after_warmup"] != 0:
        problems.append(f"bench: recompiled after the warm-up ({bench['compile']})")
    if not dry and not all(bench[k]["mfu"] for k in ("fine_single", "coarse")):
        problems.append("bench: no MFU (the card is not in the peak table: rerun with GPU_CHECK_PEAK_FLOPS=<its bf16 FLOP/s>)")


def run_record(summary, run_dir):
    if summary is None:
        return None
    r = rows(run_dir)
    keep = ("status", "compiled", "fine_steps", "coarse_steps", "total_flops", "initial_val_loss", "final_val_loss",
            "final_train_loss", "wall_time_s", "train_time_s", "tokens_per_s", "peak_memory_bytes", "mfu_by_level",
            "peak_flops", "world_size", "device")
    return {**{k: summary.get(k) for k in keep},
            "val_curve": [[x["step"], x["flops"], x["val/loss"]] for x in r if "val/loss" in x],
            "train_rows": [[x["step"], x["level"], x["train/loss"], x.get("mfu"), bool(x.get("compiled_in_row"))]
                           for x in r if "train/loss" in x][:: max(1, len(r) // 60)]}


paper_out = read_json(out / "paper.out")
paper = None
if paper_out is not None:
    ml, sl = (run_record(paper_out[k], out / f"paper_{k}") for k in ("multilevel", "single"))
    paper = {"tokenizer": tokens, "multilevel": ml, "single": sl,
             "flop_saving": 1 - ml["total_flops"] / sl["total_flops"],
             "wall_clock_saving": 1 - ml["train_time_s"] / sl["train_time_s"],
             "final_val_loss_gain": sl["final_val_loss"] - ml["final_val_loss"]}
    for name in ("multilevel", "single"):
        if paper[name]["status"] != "finished" or not paper[name]["compiled"]:
            problems.append(f"paper: the {name} run did not finish compiled")

smoke_summary = read_json(out / "smoke" / "summary.json")
smoke = run_record(smoke_summary, out / "smoke")
if smoke is not None:
    smoke["data_parallel"] = smoke["world_size"] > 1
    if not smoke["data_parallel"]:
        smoke["note"] = "one GPU: one process (NCCL needs a GPU per rank), so no data parallel"
elif not any(p.startswith("smoke") for p in problems):
    problems.append("smoke: no summary.json")

missing = [n for n in ("device", "cuda_tests", "syncs", "bench", "paper", "smoke") if n not in parts]
problems += [f"{n}: did not run" for n in missing]
ok = not problems
print(json.dumps({
    "mode": "dry-run (tiny, CPU)" if dry else "gpu",
    "ok": ok,
    "problems": problems,
    "parts": parts,
    "seconds": sum(p["seconds"] for p in parts.values()),
    "device": device,
    "cuda_tests": tests,
    "syncs": syncs,
    "bench": bench,
    "paper": paper,
    "smoke": smoke,
    "outputs": str(out),
}, indent=2))
sys.exit(0 if ok else 1)
EOF
