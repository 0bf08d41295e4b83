"""The mltrain command's one-line errors around a run: an unwritable working dir, a context longer than
the data (before the model is built), a full disk at the end (what is kept is said)."""

from __future__ import annotations

from helpers import NO_ROOM, SMOKE, one_error, run_tool, unwritable_dir

from mltrain.runs.files import read_metrics


def test_an_unwritable_working_dir_is_one_line(tmp_path):
    ro = unwritable_dir(tmp_path)
    line = one_error(run_tool("mltrain", *SMOKE, cwd=ro))
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
