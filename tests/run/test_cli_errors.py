"""The mltrain command's one-line errors around a run: a config Hydra cannot compose from the command
line (a bad value, a misspelt key, a missing preset: before any compute, nothing written, the full
report under HYDRA_FULL_ERROR=1), an unwritable working dir, a context longer than the data (before the
model is built), a full disk at the end (what is kept is said)."""

from __future__ import annotations

import pytest
from helpers import NO_ROOM, SMOKE, TOOL_SMOKE, one_error, run_tool, run_tool_here, tool_here, tree, unwritable_dir

from mltrain.runs.files import read_metrics

# A bad override -> what its one line says of it, after naming it
BAD_OVERRIDES = {
    "optim.name=lion": "invalid value 'lion', expected one of [sgd, adamw]",  # not one of a key's values
    "train.max_steps=abc": "value 'abc' of type 'str' could not be converted to Integer",  # the wrong type
    "model=gpt99": "no model preset 'gpt99' (the model presets: gpt22m, small, tiny)",  # no such group option
    "train.max_step=3": "key 'max_step' not in 'TrainConfig'; did you mean train.max_steps?",  # a misspelt key
    "train.max_steps=": "value '' of type 'str' could not be converted to Integer",  # no value
    # the packages corpus, removed (its text differed per install): the preset and the source name the valid ones
    "data=packages": "no data preset 'packages' (the data presets: embedded, fineweb_edu, prose, shards, text)",
    "data.source=packages": "invalid value 'packages', expected one of [embedded, prose, text, shards]",
}
ONE_LINE = {"HYDRA_FULL_ERROR": "0"}  # whatever the shell running the tests sets


@pytest.mark.parametrize("override", BAD_OVERRIDES)
def test_a_config_hydra_cannot_compose_is_one_line_naming_the_override(tmp_path, override):
    proc = tool_here("mltrain", *TOOL_SMOKE, override, cwd=tmp_path, env=ONE_LINE)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert lines == [f"mltrain: error: {override}: {BAD_OVERRIDES[override]}"], proc.stderr[-3000:]
    assert not proc.stdout.strip(), proc.stdout[-2000:]
    assert tree(tmp_path) == {}  # no outputs/ folder, no log


def test_a_bad_point_of_a_sweep_is_one_line_naming_it(tmp_path):
    proc = tool_here("mltrain", "-m", *TOOL_SMOKE, "optim.name=sgd,lion", cwd=tmp_path, env=ONE_LINE)
    line = one_error(proc)
    assert line == ("mltrain: error: sweep point #1 (optim.name=lion): optim.name=lion: invalid value 'lion', "
                    "expected one of [sgd, adamw]; no job was started"), line
    assert tree(tmp_path) == {}


def test_hydra_full_error_gives_hydras_full_report(tmp_path):
    proc = tool_here("mltrain", *TOOL_SMOKE, "optim.name=lion", cwd=tmp_path, env={"HYDRA_FULL_ERROR": "1"})
    assert proc.returncode == 1 and "Traceback" in proc.stderr, proc.stderr[-3000:]
    assert "ConfigCompositionException: Error merging override optim.name=lion" in proc.stderr
    assert tree(tmp_path) == {}


def test_an_unwritable_working_dir_is_one_line(tmp_path):
    ro = unwritable_dir(tmp_path)
    line = one_error(run_tool_here("mltrain", *SMOKE, cwd=ro))
    assert "cannot create hydra.run.dir=outputs/" in line


def test_a_full_disk_at_the_end_of_a_run_says_what_is_kept(tmp_path, warm_cache):
    run_dir = tmp_path / "run"
    proc = run_tool("mltrain", *SMOKE, f"hydra.run.dir={run_dir}", cwd=tmp_path,
               limits={"RLIMIT_FSIZE": 50_000})  # the rows fit; the final checkpoint (~270 kB) does not
    line = one_error(proc)
    assert "cannot write a checkpoint" in line and "no checkpoint was kept" in line
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert rows and rows[-1]["step"] == 6  # every row, whole
    assert not (run_dir / "model.safetensors").exists() and not (run_dir / "summary.json").exists()
    assert not list(run_dir.rglob(".*.tmp"))


def test_a_context_longer_than_the_data_is_refused_before_the_model_is_built(tmp_path):
    out = tmp_path / "out"
    line = one_error(run_tool("mltrain", *SMOKE, "model.block_size=100000000", f"hydra.run.dir={out}", cwd=tmp_path,
                         limits=NO_ROOM))
    assert "fewer than block_size + 1 = 100000001" in line
    assert not (out / "metrics.jsonl").exists()
