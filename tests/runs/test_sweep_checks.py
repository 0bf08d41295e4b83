"""A sweep is checked whole before its first job: points that would share a job dir, and parallel jobs
not bounded by the CPUs, are refused before anything is written."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from helpers import SMOKE, one_error, run_tool_here

from mltrain.core.errors import ConfigError
from mltrain.runs import sweep


def test_sweep_points_that_would_share_a_job_dir_are_refused_before_hydra_writes(tmp_path):
    sweep_dir = tmp_path / "sweep"
    line = one_error(run_tool_here("mltrain", "-m", *SMOKE, "train.checkpoint_interval=5,6", f"hydra.sweep.dir={sweep_dir}",
                              cwd=tmp_path))
    assert "would share the job dir" in line and "train.checkpoint_interval" in line
    assert not sweep_dir.exists()


def _launcher(n_jobs) -> OmegaConf:
    return OmegaConf.create({"hydra": {"launcher": {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher."
                                                                 "JoblibLauncher", "n_jobs": n_jobs}}})


@pytest.mark.parametrize("n_jobs", [0, -1, -3, 10_000, "auto"])
def test_parallel_jobs_are_bounded_by_the_cpus(n_jobs):
    with pytest.raises(ConfigError, match=rf"^hydra.launcher.n_jobs={n_jobs} .*nothing was started"):
        sweep.check_launcher(_launcher(n_jobs))
    sweep.check_launcher(_launcher(1))
    sweep.check_launcher(_launcher(sweep.available_cpus()))


def test_a_bad_n_jobs_leaves_the_sweep_dir_free(tmp_path):
    sweep_dir = tmp_path / "sweep"
    line = one_error(run_tool_here("mltrain", "-m", *SMOKE, "hydra/launcher=local", "hydra.launcher.n_jobs=0", "seed=0,1",
                              f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path))
    assert "hydra.launcher.n_jobs=0" in line and not sweep_dir.exists()
