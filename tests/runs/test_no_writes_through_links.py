"""Nothing is written through a link: one where mltrain or Hydra writes, in a sweep's job dir, at
metrics.jsonl, a cache, a checkpoint or a report is refused and its target left untouched."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import fake_run_dir

from mltrain.core.errors import StorageError
from mltrain.runs import rundir
from mltrain.runs.tracking import LoggerConfig, Tracker
from mltrain.training import checkpoint as ckpt


VICTIM = b"a file outside the run, nobody's to change\n" * 100


def victim(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "victim.txt"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(VICTIM)
    return path


@pytest.mark.parametrize("name", [rundir.LOCK_FILE, "metrics.jsonl", ".hydra/config.yaml", ".hydra/hydra.yaml", "cli.log",
                                  "wandb", "checkpoints/step-000001-00000001.pt"])
def test_a_link_where_mltrain_or_hydra_writes_is_refused_and_its_target_untouched(tmp_path, name):
    target = victim(tmp_path)
    link = tmp_path / "run" / name
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    with pytest.raises(StorageError, match=r"it is a symbolic link") as err:
        rundir.claim(tmp_path / "run", allow_earlier=True)
    assert str(link) in str(err.value)
    assert target.read_bytes() == VICTIM and not rundir.holds(tmp_path / "run")


def test_a_link_in_a_job_dir_of_a_sweep_is_refused(tmp_path):
    target = victim(tmp_path)
    (tmp_path / "sweep" / "seed=0" / ".hydra").mkdir(parents=True)
    (tmp_path / "sweep" / "seed=0" / ".hydra" / "overrides.yaml").symlink_to(target)
    with pytest.raises(StorageError, match="overrides.yaml: it is a symbolic link"):
        rundir.claim(tmp_path / "sweep", what="hydra.sweep.dir", earlier=rundir.earlier_sweep, allow_earlier=True)
    assert target.read_bytes() == VICTIM


def test_metrics_are_never_cut_or_appended_through_a_link(tmp_path):
    target = victim(tmp_path)
    (tmp_path / "metrics.jsonl").symlink_to(target)
    for resume in (None, {"metrics_bytes": 10, "metrics_rows": 0}):
        with pytest.raises(StorageError, match="symbolic link"):
            Tracker(tmp_path, LoggerConfig(name="jsonl"), {}, name="n", group="g", job_type="single", resume=resume)
    assert target.read_bytes() == VICTIM


def test_caches_checkpoints_and_reports_are_never_written_through_links(tmp_path, capsys):
    from mltrain.console import compare_main
    from mltrain.data.cache import TokenCache

    target = victim(tmp_path)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "tokens").symlink_to(target.parent)
    with pytest.raises(StorageError, match="tokens: it is a symbolic link"):
        TokenCache(tmp_path / "cache", "text", "bytes", "k" * 64).build(np.dtype(np.uint16), lambda writers: {})
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoints").symlink_to(target.parent)
    runner = SimpleNamespace(trainer=SimpleNamespace(state=SimpleNamespace(fine_steps=1, optimizer_steps=1)))
    with pytest.raises(StorageError, match="checkpoints: it is a symbolic link"):
        ckpt.CheckpointFolder(tmp_path / "run").save(runner)
    runs = tmp_path / "runs"
    fake_run_dir(runs, "a", "single", "default")
    fake_run_dir(runs, "b", "multilevel", "coarsening=evenodd")
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "comparison.md").symlink_to(target)
    with pytest.raises(SystemExit) as code:
        compare_main([str(runs), "--out", str(tmp_path / "report")])
    assert code.value.code == 2 and "comparison.md: it is a symbolic link" in capsys.readouterr().err
    assert [p.name for p in target.parent.iterdir()] == ["victim.txt"] and target.read_bytes() == VICTIM
