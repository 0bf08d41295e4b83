#!/usr/bin/env bash
# The GPU check, in one call of under 8 minutes on one GPU: the CUDA tests, the benchmark at gpt22m
# (64 x 256 tokens per step, bf16, compile off and on) and a 500-step multilevel run in the paper's
# setting on the embedded corpus. Prints one JSON summary on stdout (progress goes to stderr) and
# exits non-zero when a part failed.
#
#   bash scripts/gpu_check.sh            # on a machine with a CUDA GPU
#   bash scripts/gpu_check.sh --dry-run  # the same pipeline, tiny, on the CPU (tests/test_gpu_check.py)
#
# The paper's model uses the GPT-2 tokenizer; offline, tiktoken finds its files through
# TIKTOKEN_CACHE_DIR, or in shared/fixtures/gpt2-bpe (beside or inside the checkout). Without them the
# run uses byte tokens with the vocabulary padded to 50257 (same model, same cost) and says so.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: $0 [--dry-run]" >&2; exit 2 ;;
esac
OUT=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
export MLTRAIN_CACHE=${MLTRAIN_CACHE:-$OUT/cache}
export WANDB_MODE=disabled
step() { echo "gpu_check: $*" >&2; }

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
  export OMP_NUM_THREADS=1  # a shared CPU: threads waiting on each other cost more than they give
  BENCH=(--model tiny --device cpu --threads 1 --steps 10 --repeats 2 --run-repeats 1 --cycles 1 --coarse-steps 10 --after 10)
  RUN=(scale=smoke coarsening=evenodd device=cpu)
else
  BENCH=(--model gpt22m --batch 64 --device cuda)
  RUN=(experiment=multilevel scale=paper data=embedded train.max_steps=500 device=cuda)
  [ $tokenizer = bytes ] && RUN+=(data.tokenizer=bytes model.vocab_size=50257)
fi

t0=$(date +%s)
step "CUDA tests"
"$PY" -m pytest -q -m cuda -p no:cacheprovider --junitxml="$OUT/cuda_tests.xml" tests >&2
tests_rc=$?
t1=$(date +%s)
step "benchmark, compile off: ${BENCH[*]}"
"$PY" scripts/bench.py "${BENCH[@]}" > "$OUT/bench_eager.json"
eager_rc=$?
t2=$(date +%s)
step "benchmark, compile on"
"$PY" scripts/bench.py "${BENCH[@]}" --compile > "$OUT/bench_compile.json"
compile_rc=$?
t3=$(date +%s)
step "run: mltrain ${RUN[*]}"
"$PY" -m mltrain.cli "${RUN[@]}" train.progress=false "hydra.run.dir=$OUT/run" >&2
run_rc=$?
t4=$(date +%s)

"$PY" - "$OUT" "$DRY" "$tokenizer" "$tests_rc" "$eager_rc" "$compile_rc" "$run_rc" \
  "$((t1 - t0))" "$((t2 - t1))" "$((t3 - t2))" "$((t4 - t3))" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
from pathlib import Path

out, dry, tokenizer = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]
tests_rc, eager_rc, compile_rc, run_rc = map(int, sys.argv[4:8])
seconds = dict(zip(("cuda_tests", "bench_eager", "bench_compile", "run"), map(int, sys.argv[8:12])))


def read_json(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


tests = None
if (out / "cuda_tests.xml").exists():
    suite = ET.parse(out / "cuda_tests.xml").getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    tests = {"passed": n["tests"] - n["failures"] - n["errors"] - n["skipped"], "failed": n["failures"] + n["errors"],
             "skipped": n["skipped"]}
summary = read_json(out / "run" / "summary.json")
ok = {"cuda_tests": tests_rc == 0, "bench_eager": eager_rc == 0, "bench_compile": compile_rc == 0,
      "run": run_rc == 0 and summary is not None}
print(json.dumps({
    "mode": "dry-run (tiny, CPU)" if dry else "gpu",
    "ok": all(ok.values()),
    "parts_ok": ok,
    "seconds": {**seconds, "total": sum(seconds.values())},
    "cuda_tests": tests,
    "bench": {"compile_off": read_json(out / "bench_eager.json"), "compile_on": read_json(out / "bench_compile.json")},
    "run": summary and {"tokenizer": tokenizer if not dry else "bytes", **{k: summary.get(k) for k in (
        "device", "fine_steps", "coarse_steps", "total_flops", "final_train_loss", "final_val_loss",
        "initial_val_loss", "wall_time_s", "tokens_per_s", "peak_memory_bytes", "n_params")}},
    "outputs": str(out),
}, indent=2))
sys.exit(0 if all(ok.values()) else 1)
EOF
