"""The resume check and command: a cut or list-valued summary is one line naming it, a dir without
Hydra's records is not resumed under the CLI, the resume command quotes run dirs for Hydra and the shell."""

from __future__ import annotations

import shutil

import pytest
from helpers import compose_config, make_earlier_run

from mltrain.core.errors import ConfigError


@pytest.mark.parametrize("content", [b'{"status": "fin', b'["finished"]', b"\xff\xfe"])
def test_a_cut_or_list_valued_summary_is_one_line_naming_it(tmp_path, content):
    from mltrain.training.resume import previous_run

    (tmp_path / "summary.json").write_bytes(content)
    with pytest.raises(ConfigError, match=r"summary.json is unreadable .*nothing was changed"):
        previous_run(tmp_path)


def test_a_dir_without_hydra_records_is_not_resumed_under_the_cli(tmp_path):
    from hydra import initialize_config_module

    from mltrain.training.resume import check_resume

    run_dir = make_earlier_run(tmp_path / "run")
    shutil.rmtree(run_dir / ".hydra")
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "step-000001-00000001.pt").write_bytes(b"x")
    cfg = compose_config()
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):  # as under the CLI
        with pytest.raises(ConfigError, match="without its .hydra/config.yaml"):
            check_resume(run_dir, cfg)
    assert check_resume(run_dir, cfg) is not None  # from Python: the checkpoint will prove it


@pytest.mark.parametrize("name", ["runs, (ü) a", "it's here", "a=b [x] {y}", "x\\", "$HOME#1", "12-00-00", "plain-dir_1.2"])
def test_the_resume_command_quotes_run_dirs_for_hydra_and_the_shell(tmp_path, name):
    import shlex

    from hydra.core.override_parser.overrides_parser import OverridesParser

    from mltrain.training.resume import resume_command

    run_dir = tmp_path / name
    words = shlex.split(resume_command(run_dir).split("  (plus")[0])
    assert words[:2] == ["mltrain", "train.resume=true"]
    assert OverridesParser.create().parse_override(words[2]).value() == str(run_dir.resolve())


def test_a_key_added_to_the_schema_since_a_run_was_saved_is_no_difference_at_its_default():
    from omegaconf import OmegaConf

    from mltrain.training.resume import config_differences

    cfg = compose_config("coarsening=evenodd")
    saved = OmegaConf.to_container(cfg, resolve=False)
    del saved["train"]["max_steps"], saved["multilevel"]["coarse_optim"]["lr"]  # keys an older version lacked
    assert config_differences(OmegaConf.create(saved), compose_config("coarsening=evenodd",
                                                                      "multilevel.coarse_optim.lr=null")) == [
        "train.max_steps (unset there, 24 here)"]  # a value other than the schema's default (1000) differs
    assert config_differences(OmegaConf.create(saved), compose_config(
        "coarsening=evenodd", "train.max_steps=1000", "multilevel.coarse_optim.lr=null")) == []
    assert config_differences(OmegaConf.create(saved), compose_config("coarsening=evenodd", "train.max_steps=1000",
                                                                      "multilevel.coarse_optim.lr=0.1")) == [
        "multilevel.coarse_optim.lr (unset there, 0.1 here)"]
