"""What a run records about itself: run.json at its start, and a budget that is a value passed on (the
config the run records is the config it was given)."""

from __future__ import annotations

import json

import pytest
from helpers import ML, cli_here, compose_config, typed

from mltrain import run as run_module
from mltrain.run import run
from mltrain.runs.files import RUN_RECORD_FIELDS, read_run_record
from mltrain.tools.compare.loading import load_run_dir


def test_run_json_says_what_an_unfinished_run_is_and_compare_reads_it(tmp_path):
    run_dir = tmp_path / "ml"
    run(typed(compose_config(*ML, "model.n_layer=2", "train.max_steps=6", "multilevel.n_cycles=1", "seed=5")), run_dir=run_dir)
    record, summary = read_run_record(run_dir), json.loads((run_dir / "summary.json").read_text())
    assert set(record) == set(RUN_RECORD_FIELDS)
    assert record == {k: summary[k] for k in RUN_RECORD_FIELDS}
    assert record["run_kind"] == "multilevel" and record["seed"] == 5 and record["budget_steps"] == 6
    # Killed before its summary, with overrides that name no coarsening: the kind is the run's own.
    (run_dir / "summary.json").unlink()
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_text("- experiment=multilevel\n- seed=5\n")
    loaded = load_run_dir(run_dir)
    assert (loaded.run_kind, loaded.label, loaded.seed, loaded.status) == ("multilevel", record["label"], 5, "unfinished")


def test_a_budget_is_recorded_as_given_and_trains_its_fraction(tmp_path, monkeypatch):
    configs = []

    class Capturing(run_module.Tracker):
        def __init__(self, run_dir, logger_cfg, config, **kw):
            configs.append(config)  # what W&B is given as the run's config
            super().__init__(run_dir, logger_cfg, config, **kw)

    monkeypatch.setattr(run_module, "Tracker", Capturing)
    run(typed(compose_config("train.max_steps=10", "train.budget=0.5")), run_dir=tmp_path / "half")
    (config,) = configs
    assert config["train"]["budget"] == 0.5 and config["train"]["max_steps"] == 10
    s = json.loads((tmp_path / "half" / "summary.json").read_text())
    assert s["fine_steps"] == 5 and s["budget"] == 0.5 and s["budget_steps"] == 5


def test_the_hydra_record_of_a_budget_run_is_the_config_it_was_given(tmp_path):
    run_dir = tmp_path / "half"
    proc = cli_here(["scale=smoke", "train.max_steps=6", "train.budget=0.5", "train.progress=false",
                     f"hydra.run.dir={run_dir}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from omegaconf import OmegaConf

    saved = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    assert saved.train.budget == 0.5 and saved.train.max_steps == 6
    assert json.loads((run_dir / "summary.json").read_text())["fine_steps"] == 3


def test_an_unreadable_run_record_is_one_clear_error(tmp_path):
    from mltrain.core.errors import CompareError

    (tmp_path / "metrics.jsonl").write_text("")
    (tmp_path / "run.json").write_text("[1, 2]")
    with pytest.raises(CompareError, match="unreadable run record .*run.json: not a JSON object"):
        load_run_dir(tmp_path)
