"""A command refused in one line, and `--help`, import no torch: the console entry point, Hydra's
composition, mltrain's checks (config.validate through preflight.py) and the refusal are torch-free, and
the training stack is imported only once RunGuard has accepted the config (mltrain/cli.py). So are
mltrain-study's refusals of its own keys and of its runs' configs. Torch takes about as long to import as
the rest of a refusal together, and the suite starts dozens of refusals.

Each case runs its entry point in a fresh interpreter, as the console script does, and reports whether
`torch` is in sys.modules when it has exited."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import ENV, TOOL_SMOKE, tree

# The entry point with the given arguments; its exit status and whether torch was imported, as the
# last line of stdout.
PROBE = """
import json, sys
entry, *sys.argv = sys.argv[1:]
from mltrain import console
try:
    getattr(console, entry)()
except SystemExit as end:
    code = end.code
print(json.dumps({"code": code, "torch": "torch" in sys.modules}))
"""

REFUSED = [
    ("train_main", ["mltrain", *TOOL_SMOKE, "optim.name=lion"], "optim.name=lion: invalid value 'lion'"),
    ("train_main", ["mltrain", *TOOL_SMOKE, "train.max_step=3"], "did you mean train.max_steps?"),
    ("train_main", ["mltrain", *TOOL_SMOKE, "model.n_head=3"], "must be divisible by model.n_head=3"),
    ("train_main", ["mltrain", "-m", *TOOL_SMOKE, "optim.name=sgd,lion"], "sweep point #1 (optim.name=lion)"),
    ("study_main", ["mltrain-study", "study=smoke", "seeds=abc"], "seeds=abc: invalid value"),
    ("study_main", ["mltrain-study", "study=smoke", "bogus=1"], "bogus=1: key 'bogus' not in 'StudyConfig'"),
    # a run of the study that mltrain would refuse: found while the study sizes its runs (memory.py)
    ("study_main", ["mltrain-study", "study=smoke", 'common=["scale=smoke","model.dropout=2.0"]', "dir=study"],
     "model.dropout=2.0 must be in [0, 1)"),
]


def probe(tmp_path, entry: str, argv: list[str]) -> tuple[dict, subprocess.CompletedProcess]:
    proc = subprocess.run([sys.executable, "-c", PROBE, entry, *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**ENV, "HYDRA_FULL_ERROR": "0"})
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1]), proc


@pytest.mark.parametrize("entry, argv, said", REFUSED, ids=[" ".join(a[1:]) for _, a, _ in REFUSED])
def test_a_refused_command_imports_no_torch(tmp_path, entry, argv, said):
    result, proc = probe(tmp_path, entry, argv)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert result == {"code": 2, "torch": False}, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"{argv[0]}: error: ") and said in lines[0], lines
    assert tree(tmp_path) == {}


def test_help_imports_no_torch(tmp_path):
    result, proc = probe(tmp_path, "train_main", ["mltrain", "--help"])
    assert result == {"code": 0, "torch": False}, proc.stderr[-3000:]
    assert proc.stdout.startswith("mltrain: ") and tree(tmp_path) == {}


def test_an_accepted_config_imports_the_training_stack_before_the_run_dir(tmp_path):
    """The other side of the line, and proof that the probe sees torch: a config accepted, then refused
    for its run dir (a file), has imported torch."""
    (tmp_path / "taken").write_text("")
    result, proc = probe(tmp_path, "train_main", ["mltrain", *TOOL_SMOKE, f"hydra.run.dir={tmp_path / 'taken'}"])
    assert result == {"code": 2, "torch": True}, proc.stderr[-3000:]
    assert "cannot create hydra.run.dir=" in proc.stderr
