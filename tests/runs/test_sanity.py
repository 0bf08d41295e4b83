"""Numbers and keys that pass the schema but not common sense, refused in one line naming the key and
its value before any run and before the study claims its folder (runs/sanity.py, tools/study/sanity.py);
and a study or run far longer than this machine can give: its estimate said first, refused beyond a day
without allow_long / train.allow_long (a study before it claims its folder, a run before its first step)."""

from __future__ import annotations

import dataclasses
import io

import pytest

from mltrain.core.errors import ConfigError
from mltrain.runs import sanity
from helpers import refused, tool_here, typed


def study_main(*argv: str, capsys) -> tuple[int, str, str]:
    from mltrain.tools.study.cli import main

    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue(), capsys.readouterr().err


def own_studies(tmp_path) -> str:
    """hydra.searchpath with studies of the user's own: a Hydra key in an arm's grid, and in `common`."""
    own = tmp_path / "conf" / "study"
    own.mkdir(parents=True)
    (own / "hydra_grid.yaml").write_text("# @package _global_\ndefaults: [smoke]\nname: hydra_grid\n"
                                         "arms: {single: {grid: {hydra.job.chdir: [true]}}}\n")
    (own / "hydra_common.yaml").write_text("# @package _global_\ndefaults: [smoke]\nname: hydra_common\n"
                                           "common: [scale=smoke, hydra.job.chdir=true, device=cpu]\n")
    return f"hydra.searchpath=[file://{tmp_path / 'conf'}]"


@pytest.mark.parametrize("overrides, says", [
    (["tokens_per_param=inf"], "tokens_per_param=inf must be a finite number"),
    (["tokens_per_param=nan"], "tokens_per_param=nan"),
    (["tokens_per_param=1e15"], "tokens_per_param=1e+15 must be in (0, 100000]"),
    (["ladder.d16.tokens_per_param=inf"], "ladder.d16.tokens_per_param=inf"),
    (["launcher.env.OMP_NUM_THREADS=0"], "launcher.env.OMP_NUM_THREADS='0' must be a whole number of threads"),
    (["launcher.env.OMP_NUM_THREADS=abc"], "launcher.env.OMP_NUM_THREADS='abc'"),
    (["launcher.env.OMP_NUM_THREADS='-2'"], "launcher.env.OMP_NUM_THREADS='-2'"),
    (["+launcher.env.MKL_NUM_THREADS='1.5'"], "launcher.env.MKL_NUM_THREADS='1.5'"),
    (["+launcher.env.NUMEXPR_NUM_THREADS=100000"], "launcher.env.NUMEXPR_NUM_THREADS='100000'"),
    (["study=hydra_grid"], "arms.single.grid: hydra.job.chdir is a Hydra key"),
    (["study=hydra_common"], "common: 'hydra.job.chdir=true' sets a Hydra key"),
    (["arms.multilevel.overrides=['hydra.run.dir=/tmp/x']"], "arms.multilevel.overrides: 'hydra.run.dir=/tmp/x'"),
    (["launcher.overrides=['optim.lr=1']"], "launcher.overrides: 'optim.lr=1' is not a hydra.launcher.* setting"),
    (["predict_params=[inf]"], "predict_params[0]=inf"),
    (["launcher.name=local", "launcher.n_jobs=100000"], "launcher.n_jobs=100000 is more than the"),
])
def test_a_study_number_or_key_without_sense_is_one_line_before_anything(overrides, says, tmp_path, capsys):
    study = tmp_path / "study"
    code, out, err = study_main("study=smoke", f"dir={study}", own_studies(tmp_path), *overrides, capsys=capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("mltrain-study: error: "), err
    assert says in lines[0], lines[0]
    assert not study.exists()


def test_the_installed_study_refuses_infinity_and_a_thread_count_of_zero(tmp_path):
    for args, says in ((["tokens_per_param=inf"], "tokens_per_param=inf"),
                       (["launcher.env.OMP_NUM_THREADS=0"], "OMP_NUM_THREADS='0'")):
        refused(tool_here("mltrain-study", "study=smoke", f"dir={tmp_path / 'study'}", *args, cwd=tmp_path), says)
        assert not (tmp_path / "study").exists()


def test_a_study_far_longer_than_a_day_here_needs_consent_and_says_its_estimate(tmp_path, capsys):
    code, out, err = study_main("study=smoke", f"dir={tmp_path / 'study'}", "tokens_per_param=50000",
                                capsys=capsys)
    assert code == 2 and "study smoke plans" in err and "add allow_long=true" in err and " h now; at most " in err
    assert not (tmp_path / "study").exists()

    from mltrain.tools.study import stages
    from mltrain.tools.study.cli import compose_study

    from mltrain.tools.study.sanity import check_study_duration

    out = io.StringIO()
    cfg = compose_study(["study=smoke", f"dir={tmp_path / 'study'}", "tokens_per_param=50000", "allow_long=true"])
    study = stages.prepare(cfg, out)
    check_study_duration(study, out)  # consent given: its estimate said first, nothing refused
    assert "mltrain-study: study smoke plans" in out.getvalue() and " h with every tuning rule" in out.getvalue()
    assert any("train.allow_long=true" in o for s in stages.tuning_sweeps(cfg, study.layout, "d16") for o in
               s.overrides(cfg))  # its runs have the consent too
    assert not (tmp_path / "study").exists()


def test_the_smoke_study_says_no_estimate():
    from mltrain.tools.study import stages
    from mltrain.tools.study.cli import compose_study
    from mltrain.tools.study.sanity import check_study_duration

    out = io.StringIO()
    check_study_duration(stages.prepare(compose_study(["study=smoke", "dir=/nonexistent/never"]), out), out)
    assert out.getvalue() == ""


PAPER_ON_CPU = ["scale=paper", "data=embedded", "data.tokenizer=bytes", "device=cpu", "train.progress=false"]


def test_a_paper_scale_run_on_a_cpu_is_refused_with_its_estimate_before_its_first_step(tmp_path):
    line = refused(tool_here("mltrain", *PAPER_ON_CPU, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path), "this run needs")
    assert "at least" in line and "days" in line and "train.allow_long=true" in line
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "run" / "checkpoints").exists()


def test_consent_lets_a_long_run_pass_the_check(make_config):
    import torch

    from mltrain.run import check_duration, model_config

    def check(*overrides: str, tiny: bool = False) -> None:
        cfg = typed(make_config(*overrides, tiny=tiny))
        check_duration(dataclasses.replace(cfg, model=model_config(cfg.model, 256)), torch.device("cpu"))

    with pytest.raises(ConfigError, match="train.allow_long=true"):
        check(*PAPER_ON_CPU)
    check(*PAPER_ON_CPU, "train.allow_long=true")  # consent: no error
    check("device=cpu", tiny=True)  # the tests' tiny run: nothing to say


def test_the_duration_rule():
    assert sanity.duration_check("this run", 1e9, 1e10, "cpu", "k", False) is None  # a tenth of a second
    line = sanity.duration_check("this run", 7200 * 1e10, 1e10, "cpu (1 thread)", "k", False, steps=100)
    assert line.startswith("this run needs 7.2e+13 FLOPs in 100 steps: at least 2.0 hours on cpu (1 thread)")
    line = sanity.duration_check("this run", 1e9, 1e10, "cpu", "k", False, steps=5_000_000)  # tiny steps, many
    assert "at least 83 minutes" in line
    with pytest.raises(ConfigError, match="add k=true"):
        sanity.duration_check("this run", 2 * 86400 * 1e10, 1e10, "cpu", "k", False)
    assert "days" in sanity.duration_check("this run", 3 * 86400 * 1e10, 1e10, "cpu", "k", True)


@pytest.mark.parametrize("env, ok", [({"OMP_NUM_THREADS": "4"}, True), ({"OMP_NUM_THREADS": " 2 "}, True),
                                     ({"CUDA_VISIBLE_DEVICES": "0,1"}, True), ({"OMP_NUM_THREADS": ""}, False),
                                     ({"BAD-NAME": "1"}, False), ({"X": "a\0b"}, False)])
def test_environment_values(env, ok):
    if ok:
        sanity.check_env(env, "launcher.env")
    else:
        with pytest.raises(ConfigError, match="launcher.env."):
            sanity.check_env(env, "launcher.env")


# ---------------------------------------------------------------------------------------------
# Every phase counted (mltrain/method/cost.py): coarse phases, a study's arms

HUGE_COARSE = ["coarsening=evenodd", "multilevel.n_cycles=2", "multilevel.coarse_steps=100000000"]


def test_a_multilevel_run_with_a_huge_coarse_phase_is_refused_with_an_estimate_that_counts_it(tmp_path):
    run = tmp_path / "run"
    line = refused(tool_here("mltrain", "data=embedded", "data.tokenizer=bytes", "device=cpu", "train.progress=false",
                             "model.n_layer=4", "model.n_embd=32", "model.n_head=2", "model.block_size=16",
                             "train.max_steps=24", *HUGE_COARSE, f"hydra.run.dir={run}", cwd=tmp_path), "this run needs")
    assert "in 400,000,024 steps" in line and "days" in line and "train.allow_long=true" in line, line
    assert not (run / "metrics.jsonl").exists() and not (run / "checkpoints").exists()


def test_a_studys_estimate_counts_an_arms_coarse_phases(tmp_path):
    study = tmp_path / "study"
    overrides = "arms.multilevel.overrides=[" + ",".join(f"'{o}'" for o in HUGE_COARSE[1:]) + "]"
    line = refused(tool_here("mltrain-study", "study=smoke", f"dir={study}", overrides, cwd=tmp_path), "study smoke plans")
    assert "add allow_long=true" in line and " h now; at most " in line, line
    assert not study.exists()
