#!/usr/bin/env bash
# The GPU check as one command for a short lease of one GPU (docs/testing.md: what to type, what must
# travel along). Its parts, in order of what they tell per second:
#
#   device      torch, CUDA, the card and the peak MFU is measured against (training/devices.py)
#   bench       scripts/bench.py --model gpt22m --compile: fine and coarse ms/step and MFU, peak memory,
#               recompiles after the warm-up, mltrain's step against a bare nanoGPT-style loop's, the
#               fine step with each speed option (model.pad_vocab_to, model.loss_chunk)
#   paper       a 300-step compiled multilevel run at the paper's shape (gpt22m, 64 x 256 tokens) beside the
#               single-level run of as many FLOPs: both loss curves, MFU rows, wall-clock beside FLOP saving
#   syncs       scripts/syncs.py, compiled (single, multilevel, layer_drop, skip): no host sync in the steps
#               after each method's last new graph
#   cuda_tests  pytest -m cuda: none may be skipped
#   smoke       a 50-step compiled multilevel run under torchrun (NCCL, one process per GPU)
#
#   bash scripts/gpu_lease.sh [--deadline SECONDS]            # on a machine with a CUDA GPU (default 540)
#   bash scripts/gpu_lease.sh --dry-run [--inductor] [...]    # the same parts, tiny, on the CPU
#   bash scripts/gpu_lease.sh --parts device,bench [...]      # only these parts (the others `skipped`)
#
# The whole command ends within --deadline: a part whose limit (its cost, below) does not fit in the time
# left is not started and is reported `not_run` with the reason. Everything comes back as two files in
# $OUT (when set, else a folder it names on stderr): gpu_check.json (every part's status, seconds, limit
# and graphs, and what it measured; rewritten after every part) and logs.tar.gz (every part's stdout and
# stderr with dynamo's compile log, the runs' metrics and summaries, each cut to its last 2 MiB); the
# JSON is also printed on stdout. It exits 0 only when every part ran and passed (at least one part: a
# report with nothing measured is never `ok`); 1 in one line when there is no CUDA device (without
# --dry-run); 2 in one line, before any part runs and without writing anything, for bad arguments: a
# --parts value other than part names joined by commas (a space, an empty name, an unknown part), an OUT
# that is a file, a link or a folder that is not empty.
#
# It uses the machine's own Python and CUDA torch (python3, or $PYTHON). Of the packages a run needs it
# installs only those that do not import, from the wheels in .gpu-wheels/ (or $GPU_WHEELS; fetched by
# scripts/gpu_wheels.sh where the package index is reachable), with `pip --no-index --no-deps` into a
# folder of its own. --dry-run uses dynamo's eager backend (graphs traced and counted as on a GPU, in
# seconds); --inductor compiles with Inductor as a GPU run does (the cold costs the limits below come
# from). A part's limit can be set with GPU_CHECK_TIMEOUT_<PART> seconds. A card the peak table lacks:
# GPU_CHECK_PEAK_FLOPS=<its bf16 FLOP/s>. The paper's model uses the GPT-2 tokenizer; offline, tiktoken
# finds its files through TIKTOKEN_CACHE_DIR or shared/fixtures/gpt2-bpe (beside or inside the checkout);
# without them the runs use byte tokens with the vocabulary padded to 50257 (same model, same cost).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
START=$(date +%s)
DRY=0 INDUCTOR=0 DEADLINE=540
ALL_PARTS=device,bench,paper,syncs,cuda_tests,smoke WANTED=
usage() { echo "usage: $0 [--dry-run [--inductor]] [--deadline SECONDS] [--parts PART,...] (parts: $ALL_PARTS)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --inductor) INDUCTOR=1 ;;
    --deadline) [[ "${2:-}" =~ ^[0-9]+$ ]] || usage; DEADLINE=$2; shift ;;
    --parts) [ -n "${2:-}" ] || usage; WANTED=$2; shift ;;
    *) usage ;;
  esac
  shift
done
[ $INDUCTOR = 1 ] && [ $DRY = 0 ] && usage
refuse() { echo "gpu_lease: error: $*; no part was run" >&2; exit 2; }
# --parts: names of ALL_PARTS joined by single commas, nothing else (a space, an empty name or an unknown
# one would match no part and leave every part skipped: a report with nothing measured)
if [ -n "$WANTED" ]; then
  [[ "$WANTED" =~ ^[a-z_]+(,[a-z_]+)*$ ]] ||
    refuse "--parts '$WANTED': give part names joined by commas, without spaces or empty names (parts: $ALL_PARTS)"
  for name in ${WANTED//,/ }; do
    [[ ",$ALL_PARTS," == *",$name,"* ]] || refuse "--parts '$WANTED': no part is named '$name' (parts: $ALL_PARTS)"
  done
fi
wanted() { [ -z "$WANTED" ] || [[ ",$WANTED," == *",$1,"* ]]; }
# OUT: a new folder, or an empty one (never a file, a link, or a folder holding earlier results)
if [ -n "${OUT:-}" ]; then
  if [ -L "$OUT" ]; then
    refuse "OUT=$OUT is a symbolic link: give a new or empty folder"
  elif [ -e "$OUT" ] && [ ! -d "$OUT" ]; then
    refuse "OUT=$OUT exists and is not a folder: give a new or empty folder"
  elif [ -d "$OUT" ] && [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
    refuse "OUT=$OUT is not empty (earlier results are never overwritten): give a new or empty folder"
  elif [ -d "$OUT" ] && ! [ -w "$OUT" ]; then
    refuse "OUT=$OUT is not writable: give a new or empty folder"
  fi
  mkdir -p -- "$OUT" 2>/dev/null || refuse "OUT=$OUT cannot be created (its parent is missing a folder, not writable or a file)"
fi
if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ $DRY = 1 ] && [ -x "$ROOT/.venv/bin/python" ]; then
  PY=$ROOT/.venv/bin/python
else
  PY=python3  # the machine's own, with its CUDA torch
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_lease.XXXXXX")
DEST=${OUT:-$WORK/out}
mkdir -p "$DEST"
MODE=gpu TOKENS=bytes
[ $DRY = 1 ] && MODE="dry-run (tiny, CPU, $([ $INDUCTOR = 1 ] && echo inductor || echo eager))"
say() { echo "gpu_lease: $*" >&2; }
elapsed() { echo $(( $(date +%s) - START )); }
report() {  # gpu_check.json and logs.tar.gz in $DEST, from what the parts left so far
  "$PY" "$ROOT/scripts/gpu_lease.py" report "$WORK" "$DEST" $DRY "$TOKENS" "$DEADLINE" "$(elapsed)" "$MODE"
}

if [ $DRY = 0 ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  line="no CUDA device ($("$PY" -c "import torch; print('torch', torch.__version__)" 2>/dev/null || echo "no torch") in $PY)"
  printf 'device\tnot_run\t0\t%s\n' "$line" >> "$WORK/parts.tsv"
  report >/dev/null 2>&1
  echo "gpu_lease: $line; --dry-run runs the same parts tiny on the CPU" >&2
  exit 1
fi
[ -n "${OUT:-}" ] || say "results in $DEST"

export MLTRAIN_CACHE=${MLTRAIN_CACHE:-$WORK/cache}
export WANDB_MODE=disabled PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$WORK/inductor}  # the parts share compiled kernels
export TORCH_LOGS=${TORCH_LOGS:-dynamo,recompiles,graph_breaks}  # the compile log, in each part's stderr
"$PY" "$ROOT/scripts/gpu_lease.py" install "${GPU_WHEELS:-$ROOT/.gpu-wheels}" "$WORK/site" || exit 1
[ -d "$WORK/site" ] && export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}  # mltrain itself from this checkout
LINKED_CONF=0
if ! "$PY" -c "import mltrain.conf" 2>/dev/null && [ ! -e "$ROOT/mltrain/conf" ]; then
  ln -s ../conf "$ROOT/mltrain/conf" && LINKED_CONF=1  # the package's conf/ as an install maps it
fi
trap '[ $LINKED_CONF = 1 ] && rm -f "$ROOT/mltrain/conf"' EXIT

if [ $DRY = 0 ] && [ -z "${TIKTOKEN_CACHE_DIR:-}" ]; then
  for dir in "$ROOT/../shared/fixtures/gpt2-bpe" "$ROOT/shared/fixtures/gpt2-bpe"; do
    if [ -f "$dir/encoder.json" ] && [ -f "$dir/vocab.bpe" ]; then
      # tiktoken's cache names are the sha1 of each file's download URL (see shared/fixtures/README.md)
      mkdir -p "$WORK/tiktoken"
      cp "$dir/encoder.json" "$WORK/tiktoken/6c7ea1a7e38e3a7f062df639a5b80947f075ffe6"
      cp "$dir/vocab.bpe" "$WORK/tiktoken/6d1cbeee0f20b3d9449abfede4726ed8212e3aee"
      export TIKTOKEN_CACHE_DIR=$WORK/tiktoken
      break
    fi
  done
fi
[ $DRY = 0 ] && [ -n "${TIKTOKEN_CACHE_DIR:-}" ] && TOKENS=gpt2

SYNC=(--compile)
if [ $DRY = 1 ]; then
  export OMP_NUM_THREADS=1
  if [ $INDUCTOR = 0 ]; then  # dynamo traces and counts graphs as on the GPU; no backend compile
    export MLTRAIN_COMPILE_BACKEND=${MLTRAIN_COMPILE_BACKEND:-eager}
    SYNC=()  # syncs uncompiled: its graphs would only be traced
  else
    unset MLTRAIN_COMPILE_BACKEND
  fi
  DEVICE=cpu NPROC=2 SYNC+=(--steps 48 single)  # with Inductor 25-40 s a graph here: the method of fewest
  [ $INDUCTOR = 0 ] && SYNC+=(multilevel layer_drop skip)
  BENCH=(--model tiny --device cpu --threads 1 --compile --speed-options --steps 10 --repeats 1 --run-repeats 1 --cycles 1
         --coarse-steps 10 --after 10)
  PAPER=(scale=cpu model.n_layer=4 train.max_steps=30 schedule.warmup_steps=3 multilevel.n_cycles=3
         multilevel.coarse_steps=4 train.eval_interval=10 train.eval_tokens=2048)
  SMOKE=(scale=smoke train.max_steps=10)
  # seconds: each part's cold cost with --inductor (docs/testing.md) x 1.5 or more
  default_timeouts=(device=15 bench=410 paper=250 syncs=180 cuda_tests=60 smoke=200)
else
  DEVICE=cuda
  NPROC=$("$PY" -c "import torch; print(torch.cuda.device_count())")
  SYNC+=(--steps 200 single multilevel layer_drop skip)  # the methods the dry run measured; skip: decided on the device
  BENCH=(--model gpt22m --batch 64 --device cuda --compile --speed-options --steps 20 --repeats 5 --run-repeats 1 --cycles 1
         --coarse-steps 10 --after 10)
  # the paper's shape and schedule, shortened: warm-up 5% (the paper's 715 of 16,000), cycles in the first
  # steps with about as many coarse steps per fine step as the paper's 35 x 2 x 100 in 16,000
  PAPER=(scale=paper data=embedded train.max_steps=300 schedule.warmup_steps=15 multilevel.n_cycles=7
         multilevel.coarse_steps=10 train.eval_interval=50 train.eval_tokens=163840)
  [ "$TOKENS" = bytes ] && PAPER+=(data.tokenizer=bytes model.vocab_size=50257)
  SMOKE=(scale=smoke train.max_steps=50)
  # each part's cold cost measured with --dry-run --inductor x 0.75 (docs/testing.md), at least 30 s;
  # cuda_tests as measured on a GPU before (about 10 cold compiles in 120 s): the CPU skips them
  default_timeouts=(device=30 bench=205 paper=95 syncs=140 cuda_tests=120 smoke=100)
fi
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

RESERVE=10 KILL_AFTER=5  # seconds kept for the last report; for a part past its limit to die
# part NAME COMMAND...: run it under its limit when that fits in the time left, else record it not_run
# (skipped when --parts leaves it out); stdout to $WORK/NAME.out, stderr to $WORK/NAME.err (and ours);
# the report rewritten after it.
part() {
  local name=$1 seconds room start rc
  shift
  seconds=$(limit "$name")
  room=$(( DEADLINE - $(elapsed) - RESERVE - KILL_AFTER ))
  if ! wanted "$name"; then
    say "$name skipped: not among --parts $WANTED"
    printf '%s\tskipped\t%s\tnot among --parts %s\n' "$name" "$seconds" "$WANTED" >> "$WORK/parts.tsv"
  elif [ "$seconds" -gt "$room" ]; then
    say "$name not run: its limit is ${seconds} s, ${room} s are left of the ${DEADLINE} s deadline"
    printf '%s\tnot_run\t%s\tits limit is %s s, %s s were left of the %s s deadline\n' "$name" "$seconds" \
      "$seconds" "$(( room < 0 ? 0 : room ))" "$DEADLINE" >> "$WORK/parts.tsv"
  else
    say "$name (at most ${seconds} s): $*"
    printf '%s\tstart\t%s\n' "$name" "$seconds" >> "$WORK/parts.tsv"
    report >/dev/null
    start=$(date +%s)
    timeout --kill-after=$KILL_AFTER "$seconds" "$@" > "$WORK/$name.out" 2> >(tee "$WORK/$name.err" >&2)
    rc=$?
    printf '%s\tend\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - start ))" >> "$WORK/parts.tsv"
  fi
  report >/dev/null
}

part device "$PY" - "$DEVICE" <<'EOF'
import json, subprocess, sys
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

part bench "$PY" scripts/bench.py "${BENCH[@]}"

# The multilevel run, then the single-level run of as many FLOPs (its own schedule ending there).
part paper "$PY" - "$WORK" "$DEVICE" "${PAPER[@]}" <<'EOF'
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

part syncs "$PY" scripts/syncs.py "$WORK/syncs.json" --device "$DEVICE" "${SYNC[@]}"

# Only the modules that mark tests `cuda` (collecting the whole suite to skip all but these took ~16 s of a
# 2-core CPU's dry run); found here, so a cuda test added to another module is run too.
mapfile -t CUDA_MODULES < <(grep -rlE --include='*.py' 'mark\.cuda' tests | sort)
part cuda_tests "$PY" -m pytest -q -rs -m cuda -p no:cacheprovider --junitxml="$WORK/cuda_tests.xml" "${CUDA_MODULES[@]}"

part smoke "$PY" -m torch.distributed.run --standalone "--nproc_per_node=$NPROC" -m mltrain.cli experiment=multilevel \
  "${SMOKE[@]}" "device=$DEVICE" train.compile=true train.progress=false "hydra.run.dir=$WORK/smoke"

report
rc=$?
cat "$DEST/gpu_check.json"
exit $rc
