#!/usr/bin/env bash
# The Python packages mltrain needs that a GPU machine's image usually lacks (hydra-core, omegaconf,
# antlr4-python3-runtime: GPU images ship PyTorch, Triton and numpy, not these), as wheels for that
# machine's Python, into .gpu-wheels/ (git ignores it): run it where the package index is reachable, carry
# the folder to the machine (it must be copied along with the repository: git does not track it), and
# scripts/gpu_lease.sh installs from it only the packages that do not import there, with `pip --no-index
# --no-deps` beside the machine's own CUDA torch (never a torch of its own).
#
#   bash scripts/gpu_wheels.sh                       # for Python 3.12, this checkout's versions
#   bash scripts/gpu_wheels.sh --bare                # and numpy, pyyaml, packaging, safetensors, tqdm (an
#                                                    # image with torch alone)
#   bash scripts/gpu_wheels.sh --python 3.11 hydra-core==1.3.2 omegaconf==2.3.0 antlr4-python3-runtime==4.9.3
#
# A package published without a wheel (antlr4-python3-runtime 4.9.3, pure Python) is built into one here.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${GPU_WHEELS:-$ROOT/.gpu-wheels}
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
PYVER=3.12
NAMES=(hydra-core omegaconf antlr4-python3-runtime)
if [ "${1:-}" = "--bare" ]; then
  NAMES+=(numpy pyyaml packaging safetensors tqdm)
  shift
fi
if [ "${1:-}" = "--python" ]; then
  PYVER=${2:?--python needs a version such as 3.12}
  shift 2
fi
if [ $# -eq 0 ]; then  # the versions this checkout runs with
  set --
  for name in "${NAMES[@]}"; do
    version=$("$PY" -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')
    [ -n "$version" ] || { echo "gpu_wheels: $name is not installed in $PY: name its version (NAME==VERSION)" >&2; exit 2; }
    set -- "$@" "$name==$version"
  done
fi
mkdir -p "$DEST"
for spec in "$@"; do
  if ! "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
      --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d "$DEST" "$spec" 2>/dev/null; then
    "$PY" -m pip wheel -q --no-deps -w "$DEST" "$spec"  # no wheel published: build one (pure Python)
  fi
done
ls -1 "$DEST"/*.whl
echo "gpu_wheels: $(ls "$DEST"/*.whl | wc -l) wheels in $DEST for Python $PYVER; carry that folder with the checkout" >&2
