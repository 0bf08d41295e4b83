"""mltrain-study: the shipped studies compose and check; bad input is one line before any run; the
steps of a scale come from its tokens per parameter; sweeps, folders and the frontier's grouping; the
status view; the ladder report and its trend sentence on constructed ladders, along an axis of one's own
too; and, end to end, the smoke study, a second invocation that launches nothing, and interrupted
studies that resume to the same reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO, run_main, typed

from mltrain.core.errors import ConfigError
from mltrain.tools.compare import Arm, Report
from mltrain.tools.study import compose, ladder, schema, stages
from mltrain.tools.study.axes import AXES, ladder_axis
from mltrain.tools.study.cli import compose_study
from mltrain.tools.study.plan import EVAL, TUNE, Choice, Layout, evaluation_sweeps, tuning_sweeps


# The smoke study's d32 scale by hand: token embedding 256x32 (tied head) + positions 16x32 + 2 blocks of
# (attention 32x96 + 32x32, MLP 32x128 + 128x32) = 8,192 + 512 + 2 x 12,288; no biases, no norm weights.
SMOKE_D32_PARAMS = 256 * 32 + 16 * 32 + 2 * (32 * 96 + 32 * 32 + 32 * 128 + 128 * 32)


# ---------------------------------------------------------------------------------------------
# Studies compose; their sizes; bad input


SHIPPED = {  # study -> (rungs at least, the arms' presets it must have)
    "smoke": (2, {"single", "multilevel"}),
    "cpu_ladder": (3, {"single", "multilevel", "schedule_control", "random_control"}),
    "paper_ladder": (3, {"single", "multilevel", "schedule_control", "random_control"}),
    "depth_ladder": (4, {"single", "multilevel", "schedule_control"}),
    "depth_rivals": (1, {"single", "multilevel", "schedule_control", "random_control", "ode_step", "raptr"}),
    "data_ladder": (3, {"single", "multilevel", "schedule_control", "stacking", "raptr"}),
    "adamw_check": (1, {"single", "adamw_reset", "raptr"}),
}


# The studies whose every setting `stages.prepare` composes and validates in another test:
# test_a_key_with_one_value_is_a_fixed_setting_kept_in_the_arm_label_not_tuned_by_the_verdict (cpu_ladder) and
# tests/e2e/test_studies.py's test_every_setting_of_the_big_studies_composes_and_validates (the others).
PREPARED_IN_FULL = {"cpu_ladder", "paper_ladder", "depth_ladder", "data_ladder", "adamw_check"}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_studies_compose_check_and_every_arm_validates_at_every_scale(name, request):
    if name == "paper_ladder":
        request.getfixturevalue("gpt2_cache")  # its parameter counts need the GPT-2 vocabulary
    cfg = compose_study([f"study={name}"])
    schema.check(cfg)
    counts = {schema.settings_count(a) for a in cfg.arms.values()}
    assert len(counts) == 1
    rungs, presets = SHIPPED[name]
    assert len(cfg.ladder) >= rungs and {a.experiment for a in cfg.arms.values()} >= presets
    if name != "smoke":  # tuned on seed 0 alone, 3 settings per arm or more (the depth ladders' 3, with the
        # frontier's LR neighbours and edges), 4 evaluation seeds or more
        assert list(cfg.selection_seeds) == [0] and counts.pop() >= 3
        assert all(len(schema.eval_seeds(cfg, r)) >= 4 for r in cfg.ladder)
    layout = Layout(Path("unused"))
    with compose.Composer() as composer:
        sizes = compose.ladder_sizes(cfg, composer)
        # One setting per arm here, for the studies whose every setting no other test composes: `prepare`
        # composes and validates them all, for cpu_ladder below and for the others in tests/e2e/test_studies.py.
        for scale in cfg.ladder if name not in PREPARED_IN_FULL else ():
            for sweep in tuning_sweeps(cfg, layout, scale, sizes[scale].max_steps):
                run = sweep.runs()[0]
                from mltrain.config import validate

                validate(typed(composer.compose(sweep.job_overrides(run, cfg), f"{scale}/{sweep.arm}")))
    values = [s.on_axis(cfg.ladder_axis) for s in sizes.values()]
    assert sorted(values) == values  # a ladder, small to large along its axis
    if name == "paper_ladder":
        assert sizes["gpt22m"].n_params == 22_368_512 and sizes["gpt22m"].max_steps == 16_000


def test_max_steps_follow_tokens_per_parameter():
    studies = [compose_study(["study=smoke", *o]) for o in ([], ["tokens_per_param=2"], ["ladder.d32.max_steps=7"])]
    with compose.Composer() as composer:
        sizes, doubled, fixed = (compose.ladder_sizes(s, composer) for s in studies)
    assert sizes["d32"].n_params == SMOKE_D32_PARAMS == 33_280
    assert sizes["d32"].tokens_per_step == 4 * 16  # scale=smoke: batch 4 x context 16
    assert sizes["d32"].max_steps == round(0.1 * SMOKE_D32_PARAMS / 64) == 52
    assert doubled["d32"].max_steps == round(2 * SMOKE_D32_PARAMS / 64) == 1040
    assert doubled["d32"].tokens_per_param == pytest.approx(2.0, rel=1e-3)
    assert fixed["d32"].max_steps == 7 and fixed["d16"].max_steps == sizes["d16"].max_steps


@pytest.mark.parametrize("overrides, says", [
    (["arms.multilevel.experiment=nope"], "arm multilevel"),  # an unknown preset
    (["arms.multilevel.overrides=['optim.lrr=0.1']"], "Could not override 'optim.lrr'"),  # an unknown key of a run
    (["seed=[3]"], "seed=[3]: key 'seed' not in 'StudyConfig'; did you mean seeds?"),  # an unknown key of the study
    (["study=smokee"], "study=smokee: no study preset 'smokee' (the study presets: "),  # as mltrain says it
    (["study=nogrid"], "arm extra has no grid"),  # a study of the user's own (tests/conf below)
    (["arms.multilevel.grid={optim.lr:[0.03,0.1,0.3]}"], "tuned unequally (single 2, multilevel 3 settings)"),
    (["seeds=[0,1]"], "seed [0] in both selection_seeds and seeds"),
    (["ladder.d16.overrides=['model.n_embd=16','model.n_head=2','model.n_layer=3']"],
     "scale d16, arm multilevel, optim.lr=0.03: model.n_layer=3 is not divisible"),  # evenodd cannot halve 3 blocks
    (["arms.multilevel.grid={optim.lr:[0.03,-1.0]}"], "optim.lr=-1.0 must be > 0"),
    (["study=nope"], "nope"),
    (["arms.single.experiment=multilevel"], "arm single sweeps train.budget, the frontier's axis, but its runs are not single-level"),
    (["ladder_axis=height"], "ladder_axis='height': expected one of params, depth, width, tokens_per_param"),
    (["ladder_axis=depth"], "ladder_axis=depth: rungs d16 and d32 have the same depth (2): a ladder's rungs must vary its axis"),
    (["ladder_axis=depth", "ladder.d32.overrides=['model.n_embd=32','model.n_head=2','model.n_layer=4']"],
     "ladder_axis=depth: rungs d16 and d32 also differ in model.n_embd (16 at d16, 32 at d32): a depth ladder varies "
     "model.n_layer alone"),
    (["ladder.d32.overrides=['model.n_embd=32','model.n_head=2','optim.momentum=0.5']"],
     "ladder_axis=params: rungs d16 and d32 also differ in optim.momentum (0.9 at d16, 0.5 at d32)"),
    (["ladder_axis=width", "predict_params=[1e6]"], "predict_params extrapolates along parameters"),
    (["ladder.d16.seeds=[0]"], "seed [0] in both selection_seeds and seeds"),
    # what cannot give a result: an arm on another held-out set than the frontier's (every run of it would be
    # left out of the verdict), a value repeated in another spelling, a frontier that cannot bracket
    (["arms.multilevel.overrides=['train.eval_tokens=96']"], "scale d16: arm multilevel evaluates on another "
     "held-out set than the frontier (arm single): train.eval_tokens=96, the frontier's is 128"),
    (["arms.multilevel.overrides=['data.val_fraction=0.1']"], "arm multilevel evaluates on another held-out set"),
    (["arms.multilevel.overrides=['model.block_size=8']"], "model.block_size=8, the frontier's is 16"),
    (["arms.multilevel.grid={optim.lr:[0.3,'0.30']}"], "grid key optim.lr repeats a value ([0.3, '0.30']: 0.3 and "
     "'0.30' are one value (the same number)"),
    (["arms.multilevel.grid={optim.lr:[1,1.0]}"], "repeats a value"),
    (["arms.single.grid={optim.lr:[0.03,0.3],train.budget:[1.0]}", "frontier.max_budget=3"],
     "frontier.max_budget=3 cannot bracket: an arm past the frontier's data is told on 2 budgets or more, and arm "
     "single has 1 (train.budget: 1)"),
    (["frontier.max_budget=2"], "frontier.max_budget=2 cannot bracket: the first budget it would add is 3"),
])
def test_bad_input_is_one_line_before_any_run(overrides, says, tmp_path, capsys):
    own = tmp_path / "conf" / "study"
    own.mkdir(parents=True)
    (own / "nogrid.yaml").write_text("# @package _global_\ndefaults: [smoke]\nname: nogrid\n"
                                     "arms: {extra: {experiment: multilevel}}\n")
    code, out, err = run_main("study=smoke", f"dir={tmp_path / 'study'}", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
                              *overrides, capsys=capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("mltrain-study: error: "), err
    assert says in lines[0]
    assert not (tmp_path / "study").exists()


def test_keys_that_do_not_change_the_held_out_set_may_differ_between_arms(tmp_path):
    from mltrain.tools.study import stages

    cfg = compose.typed_study(compose_study(["study=smoke", f"dir={tmp_path}", "~ladder.d32",
                                             "arms.multilevel.overrides=['train.eval_interval=2','data.cache_dir=x']"]))
    stages.prepare(cfg)  # the held-out set is the frontier's: no error
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------------------------------------
# Sweeps and folders


def test_tuning_sweeps_name_folders_by_the_swept_keys_and_exclude_the_rest(tmp_path):
    cfg = compose_study(["study=smoke", f"dir={tmp_path}"])
    layout = Layout(tmp_path)
    single, multilevel = tuning_sweeps(cfg, layout, "d16", max_steps=16)
    assert [r.dir.name for r in single.runs()][:2] == ["optim.lr=0.03,seed=0,train.budget=0.5",
                                                     "optim.lr=0.03,seed=0,train.budget=1.0"]
    assert len(single.runs()) == 6 and len(multilevel.runs()) == 2
    args = multilevel.overrides(cfg)
    assert "optim.lr=0.03,0.3" in args and "seed=0" in args and "train.max_steps=16" in args
    assert "train.resume=true" in args and "logger.group=d16/multilevel" in args and "logger.job_type=tune" in args
    assert "logger.tags=[smoke]" in args and "hydra/launcher=basic" in args
    excluded = next(a for a in args if a.startswith("hydra.job.config.override_dirname.exclude_keys="))
    assert "train.max_steps" in excluded and "experiment" in excluded and "optim.lr" not in excluded and ",seed" not in excluded


def test_a_key_with_one_value_is_a_fixed_setting_kept_in_the_arm_label_not_tuned_by_the_verdict(tmp_path):
    """Also cpu_ladder's case of tests/e2e/test_studies.py's check that every setting of the big studies
    composes and validates (`prepare` composes them all; once is enough)."""
    cfg = compose_study(["study=cpu_ladder", f"dir={tmp_path}"])
    assert schema.varied_keys(cfg) == ["optim.lr", "multilevel.coarse_optim.lr"]
    study = stages.prepare(cfg)
    assert set(study.labels) == set(study.cfg.ladder) and len(study.kinds) == len(study.cfg.ladder) * len(study.cfg.arms)
    assert not any(tmp_path.iterdir())  # checking writes nothing
    labels = study.labels["d32"]
    assert "stacking.operator=interleave" in labels["stacking"] and "raptr.rescale=False" in labels["raptr"]
    assert not any("optim.lr=" in label or "warmup_steps" in label for label in labels.values())


def test_the_frontier_evaluates_each_budget_at_its_own_setting_one_sweep_per_setting(tmp_path):
    cfg = compose_study(["study=smoke", f"dir={tmp_path}"])
    choices = {"single": Choice({"optim.lr": "0.3"}, {"0.5": {"optim.lr": "0.03"}, "1.0": {"optim.lr": "0.3"},
                                                      "2.0": {"optim.lr": "0.3"}}),
               "multilevel": Choice({"optim.lr": "0.03"})}
    sweeps = evaluation_sweeps(cfg, Layout(tmp_path), "d16", choices, max_steps=16)
    names = sorted(r.dir.name for s in sweeps for r in s.runs())
    assert names == sorted([*(f"optim.lr=0.03,seed={s},train.budget=0.5" for s in (1, 2)),
                            *(f"optim.lr=0.3,seed={s},train.budget={b}" for s in (1, 2) for b in ("1.0", "2.0")),
                            *(f"optim.lr=0.03,seed={s}" for s in (1, 2))])
    assert len(sweeps) == 3 and {s.stage for s in sweeps} == {EVAL}
    assert {s.dir.name for s in sweeps} == {"single", "multilevel"}  # the frontier's sweeps share a folder


def test_status_reads_the_folders_and_runs_nothing(tmp_path, capsys):
    cfg = compose_study(["study=smoke", f"dir={tmp_path}"])
    layout = Layout(tmp_path)
    single = tuning_sweeps(cfg, layout, "d16")[0].runs()
    for run, status in zip(single, ["finished", "finished", "diverged", "interrupted"]):
        run.dir.mkdir(parents=True)
        (run.dir / "summary.json").write_text(json.dumps({"status": status}))
    single[4].dir.mkdir()  # started, killed before a summary
    edge = single[0].dir.parent / "optim.lr=3.0,seed=0"  # a run a tuning rule added: not in the grid
    edge.mkdir()
    (edge / "summary.json").write_text(json.dumps({"status": "finished"}))
    code, out, _ = run_main("study=smoke", f"dir={tmp_path}", "--status", capsys=capsys)
    assert code == 0
    row = next(line for line in out.splitlines() if "d16" in line and TUNE in line and "single" in line)
    assert "2/6 finished, 1 diverged, 2 to resume, 1 not started" in row
    added = next(line for line in out.splitlines() if "d16" in line and " added " in line)
    assert "1/1 finished" in added and "tuning rules added" in added
    assert "waits for stage 1" in out and "not yet written" in out
    last = [line for line in out.splitlines() if line.startswith(("complete", "not complete"))]
    assert len(last) == 1 and last[0].startswith("not complete: ") and "runs not ended" in last[0]
    assert "wait for stage 1" in last[0] and "d16's verdict, d32's verdict, the ladder report not yet written" in last[0]
    assert "plans" in out and " took " not in out  # an unfinished study's cost is a plan
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d16"]  # nothing written, no lock taken


# ---------------------------------------------------------------------------------------------
# The ladder report and the trend


def multiplier(m: float, spread: float = 0.02) -> dict:
    return {"available": True, "why": None, "M": m, "M_lo": m * (1 - spread), "M_hi": m * (1 + spread),
            "saving": 1 - 1 / m, "saving_lo": 1 - 1 / (m * (1 - spread)), "saving_hi": 1 - 1 / (m * (1 + spread)),
            "extrapolated": False, "beyond_data": None}


def scale_result(name: str, n: int, m: dict | None, single_by_budget=None, seeds=(1, 2, 3, 4)) -> ladder.ScaleResult:
    labels = {"single": f"experiment=single,{name}", "multilevel": f"experiment=multilevel,{name}"}
    arms = [{"arm": "single", "label": labels["single"], "run_kind": "single",
             "selected_by_budget": single_by_budget or {"1.0": {"optim.lr": 0.1}}, "selected": {"optim.lr": 0.1},
             "eval_seeds": [1, 2, 3, 4]}]
    if m is not None:
        arms.append({"arm": "multilevel", "label": labels["multilevel"], "run_kind": "multilevel",
                     "selected": {"optim.lr": 0.3}, "eval_seeds": list(seeds), "multiplier": m})
    return ladder.ScaleResult(name, n, 100, 8.0, labels,
                              comparison=Report.from_json({"arms": arms, "warnings": ["w"], "optimistic": False}))


def trend_of(ms: list[float], spread: float = 0.02) -> dict:
    results = [scale_result(f"s{i}", n, multiplier(m, spread)) for i, (n, m) in enumerate(zip([1e5, 2e5, 4e5, 8e5], ms))]
    return ladder.ladder_report("t", ["single", "multilevel"], "single", results, []).trends[0].to_json()


@pytest.mark.parametrize("ms, verdict", [
    ([1.10, 1.21, 1.33, 1.46], "growing"),  # x1.1 per doubling: slope log2(1.1)/1 = 0.14
    ([1.30, 1.18, 1.07, 0.97], "shrinking"),
    ([1.20, 1.205, 1.198, 1.202], "flat"),
])
def test_trend_sentence_on_constructed_ladders(ms, verdict):
    t = trend_of(ms)
    assert t["verdict"] == verdict and f"is {verdict} with scale" in t["sentence"]
    if verdict == "growing":
        assert t["slope"] == pytest.approx(0.1375, abs=0.01)


def test_trend_cannot_tell_with_wide_intervals_or_too_few_scales():
    wide = trend_of([1.1, 1.2, 1.1, 1.2], spread=0.4)
    assert wide["verdict"] == "cannot tell" and "cannot tell" in wide["sentence"] and wide["slope_lo"] < 0 < wide["slope_hi"]
    one = ladder.ladder_report("t", ["single", "multilevel"], "single",
                               [scale_result("a", 1e5, multiplier(1.2)), scale_result("b", 2e5, None)], [])
    assert one.trends[0].verdict == "too few scales to tell" and "a multiplier at 1 scale(s)" in one.trends[0].sentence


def test_a_one_rung_study_is_titled_as_one_rung_not_a_ladder():
    report = ladder.ladder_report("check", ["single", "multilevel"], "single", [scale_result("L8", 1e5, multiplier(1.2))], [])
    md = ladder.render_markdown(report)
    assert md.startswith("# Study check: the verdict at one rung (L8)\n") and "survive along" not in md
    assert "## Trend along scale (one rung: none to tell)" in md and "too few scales to tell" in md
    two = ladder.render_markdown(ladder.ladder_report(
        "t", ["single", "multilevel"], "single", [scale_result("a", 1e5, multiplier(1.1)), scale_result("b", 2e5, multiplier(1.3))], []))
    assert two.startswith("# Study t: does the saving survive along scale?")


def test_two_scales_or_two_seeds_per_scale_are_too_few_for_a_trend():
    # Two scales with tight intervals: a line through two points always fits, so no word and no interval.
    two = ladder.ladder_report("t", ["single", "multilevel"], "single",
                               [scale_result("a", 1e5, multiplier(1.1, 0.001)), scale_result("b", 2e5, multiplier(1.3, 0.001))], [])
    t = two.trends[0].to_json()
    assert t["verdict"] == "too few scales to tell" and "slope" not in t and "growing" not in t["sentence"]
    # Four scales, two evaluation seeds each: their bootstrap intervals are no measurement.
    results = [scale_result(f"s{i}", n, multiplier(m), seeds=(1, 2))
               for i, (n, m) in enumerate(zip([1e5, 2e5, 4e5, 8e5], [1.1, 1.2, 1.3, 1.4]))]
    few = ladder.ladder_report("t", ["single", "multilevel"], "single", results, []).trends[0].to_json()
    assert few["verdict"] == "too few seeds to tell" and "fewer than 4 evaluation seeds" in few["sentence"]


def test_scatter_beyond_the_intervals_widens_the_slope_interval():
    tight = trend_of([1.1, 1.3, 1.15, 1.4], spread=0.001)
    assert "widened by their scatter" in tight["method"]
    assert tight["slope_hi"] - tight["slope_lo"] > 0.1  # far wider than the 0.1% intervals alone allow


def test_an_axis_registered_from_outside_is_accepted_checked_and_named_from_the_registry():
    shipped = dict(AXES)
    try:
        @ladder_axis(name="context", keys=("model.block_size",), words="context length", symbol="context",
                     title="context: model.block_size", unit="tokens")
        def context(size) -> float:
            return size.tokens_per_step / 4  # a batch of 4 sequences

        assert list(AXES) == [*shipped, "context"] and AXES["context"].value is context
        schema.check(compose_study(["study=smoke", "ladder_axis=context"]))  # a ladder_axis by its registered name
        sizes = {"a": compose.ScaleSize(1000, 10, 64), "b": compose.ScaleSize(2000, 10, 64)}
        assert [s.on_axis("context") for s in sizes.values()] == [16.0, 16.0]
        with pytest.raises(ConfigError, match=r"rungs a and b have the same context length \(16\)"):
            compose.check_rungs("context", sizes, {})
        results = [scale_result(f"s{i}", n, multiplier(m)) for i, (n, m) in enumerate(zip([1e5, 2e5], [1.1, 1.2]))]
        for r, x in zip(results, (16, 32)):
            r.axis_value = x
        report = ladder.ladder_report("t", ["single", "multilevel"], "single", results, [], "context")
        assert report.axis_label == "context: model.block_size" and [s.x for s in report.rungs] == [16, 32]
        assert "changes with context" in report.trends[0].sentence
    finally:
        AXES.clear()
        AXES.update(shipped)


def test_an_arm_is_found_in_the_verdict_by_its_label_however_it_is_spelt():
    entries = [Arm.from_json({"label": "experiment=single,model.n_embd=32", "run_kind": "single"}),
               Arm.from_json({"label": "device=cpu,experiment=multilevel,logger.tags=[a,b],train.resume=true",
                              "run_kind": "multilevel"})]
    assert ladder.find_arm(entries, "experiment=single,model.n_embd=32", "single") is entries[0]
    # compare may keep the bookkeeping keys mltrain's own labels leave out: the same arm all the same
    assert ladder.find_arm(entries, "experiment=multilevel", "multilevel") is entries[1]
    assert ladder.find_arm(entries, "experiment=multilevel,optim.momentum=0.5", "multilevel") is None


def test_ladder_report_files_table_prediction_and_what_is_missing(tmp_path):
    results = [scale_result("s0", 100_000, multiplier(1.2)), scale_result("s1", 200_000, multiplier(1.1)),
               scale_result("s1b", 300_000, multiplier(1.05)), scale_result("s2", 400_000, None)]
    results[3].why_no_verdict = None
    results[3].missing = ["s2/eval/multilevel/optim.lr=0.3,seed=1: crashed: RuntimeError: boom"]
    report = ladder.ladder_report("toy", ["single", "multilevel"], "single", results, [22_368_512])
    ladder.write_ladder(report, tmp_path / "ladder")
    md = (tmp_path / "ladder.md").read_text()
    assert "| s0 | 100,000 | 8.0 | 100 | — | single | budget 1.0: optim.lr=0.1 | the frontier |" in md
    assert "| multilevel | optim.lr=0.3 | 1.200 [1.176, 1.224] | 16.7% [15.0%, 18.3%] | 4 |" in md
    assert "Extrapolation, not a measurement: at 22.4M parameters" in md
    assert "s2/multilevel: not in the verdict" in md and "crashed: RuntimeError: boom" in md
    assert (tmp_path / "ladder.png").stat().st_size > 0
    saved = json.loads((tmp_path / "ladder.json").read_text())
    assert saved["trends"][0]["verdict"] == "shrinking" and saved["trends"][0]["predictions"][0]["M"] < 1.1


def test_the_ladder_plot_labels_the_multipliers_it_shows(tmp_path, monkeypatch):
    """A log axis ticks 1, 2, ..., 9 x 10^k only: over M 0.9 to 1.3 nothing above 1 would be labelled."""
    from mltrain.core import guarded

    drawn = {}

    def keep(fig, path, **kw):
        ax = fig.axes[0]
        lo, hi = ax.get_ylim()
        drawn["labels"] = [float(t) for t in ax.get_yticks() if lo <= t <= hi]

    monkeypatch.setattr(guarded, "write_figure", keep)
    results = [scale_result(f"s{i}", n, multiplier(m)) for i, (n, m) in
               enumerate([(100_000, 0.95), (200_000, 1.1), (400_000, 1.25)])]
    ladder.plot_ladder(ladder.ladder_report("toy", ["single", "multilevel"], "single", results, []), tmp_path / "l.png")
    above = [t for t in drawn["labels"] if t > 1.0]
    assert len(above) >= 2 and min(above) <= 1.15 and 0.95 <= min(drawn["labels"]) <= 1.0, drawn


def test_readme_study_commands_compose_and_pass_the_checks():
    from helpers import doc_commands

    commands = doc_commands("mltrain-study")
    assert {a[0] for a in commands} >= {"study=smoke", "study=cpu_ladder"} and any("--status" in a for a in commands)
    for args in commands:
        schema.check(compose_study([a for a in args if not a.startswith("--")]))


def test_the_new_ladders_hold_their_stated_rungs():
    """The depth ladder's 8-block rung as stated (width 32, context 32, batch 8, 8 tokens per parameter
    = 3,360 steps); the data ladder's 8-token rung is cpu_ladder's d32 run for run (on data=prose, with the ladders'
    held-out set: 32,768 tokens every 1,000 steps); the coarse phases
    cost ~34% of the fine steps' FLOPs at every rung of both."""
    from mltrain.core.flops import train_flops_per_token

    depth, data, cpu = (compose_study([f"study={n}"]) for n in ("depth_ladder", "data_ladder", "cpu_ladder"))
    with compose.Composer() as composer:
        sizes = {n: compose.ladder_sizes(c, composer) for n, c in (("depth", depth), ("data", data))}
        l8 = composer.compose([*depth.common, *depth.ladder.L8.overrides], "L8")
        assert (l8.model.n_layer, l8.model.n_embd, l8.model.block_size, l8.train.batch_size) == (8, 32, 32, 8)
        assert sizes["depth"]["L8"].max_steps == 3360 and sizes["depth"]["L8"].tokens_per_param == pytest.approx(8.0)
        assert [s.on_axis("depth") for s in sizes["depth"].values()] == [4, 8, 12, 16]
        assert all(schema.eval_seeds(study, rung) == [1, 2, 3, 4, 5] for study in (depth, data) for rung in study.ladder)
        assert [round(s.tokens_per_param) for s in sizes["data"].values()] == [8, 16, 32]
        for name, study in (("depth", depth), ("data", data)):
            for rung, size in sizes[name].items():
                cfg = composer.compose([*study.common, *study.ladder[rung].overrides, "experiment=multilevel"], rung)
                per_token = lambda n, m=cfg.model: train_flops_per_token(n, m.n_embd, 256, m.block_size)  # noqa: E731
                coarse = cfg.multilevel.n_cycles * 2 * cfg.multilevel.coarse_steps * per_token(cfg.model.n_layer // 2)
                assert coarse / (size.max_steps * per_token(cfg.model.n_layer)) == pytest.approx(0.34, abs=0.005)
        for arm in ("single", "multilevel", "schedule_control", "stacking", "raptr"):
            same = ("experiment", "overrides", "grid")  # the pilots that fixed the grids are counted in data_ladder
            assert {k: data.arms[arm][k] for k in same} == {k: cpu.arms[arm][k] for k in same}
            one = ["seed=1", "optim.lr=0.3"]
            a = composer.compose([*data.common, *data.ladder.t8.overrides, "train.max_steps=1824",
                                  f"experiment={data.arms[arm].experiment}", *one], "t8")
            b = composer.compose([*cpu.common, "data=prose", "train.eval_tokens=32768", "train.eval_interval=1000",
                                  *cpu.ladder.d32.overrides, "train.max_steps=1824",
                                  f"experiment={cpu.arms[arm].experiment}", *one], "d32")
            assert a == b, arm


PROSE_TRAIN_TOKENS = 16_292_102  # data=prose's training split, byte tokens (tests/data/test_prose_corpus.py)


def _largest_run_tokens(study) -> tuple[int, str]:
    """(training tokens, which run) of the study's largest run, every level's steps and the control's
    counted as summary.json's `epochs` counts them: each arm at budget 1, the frontier arm at each of its
    budgets and bracketing's, the control's schedule at each, its length scaled by the budget and its
    largest factor. The other grid keys (LRs, warm-ups) do not change a run's steps: their first value."""
    import dataclasses

    from mltrain.method.plan import build_plan, planned_steps
    from mltrain.tools.study.plan import control_coarse_steps
    from mltrain.tools.study.planned import frontier_budgets

    base, extra = frontier_budgets(study)
    budgets, control = [*base, *extra], study.frontier.control_arm
    largest = (0, "")
    with compose.Composer() as composer:
        for rung, size in compose.ladder_sizes(study, composer).items():
            for name, arm in study.arms.items():
                grid = [f"{k}={v[0]}" for k, v in arm.grid.items() if k != "train.budget"]
                for budget in budgets if name in (schema.frontier_arm(study), control) else [1.0]:
                    length = []
                    if name == control:
                        factor = max(study.frontier.control_length_factors)
                        length = [f"multilevel.coarse_steps={round(control_coarse_steps(study, rung) * budget * factor)}"]
                    cfg = typed(composer.compose([*study.common, *study.ladder[rung].overrides,
                                                  f"experiment={arm.experiment}", *(arm.get("overrides") or []), *grid,
                                                  f"train.max_steps={size.max_steps}", f"train.budget={budget}", *length],
                                                 rung))
                    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=256))
                    tokens = planned_steps(build_plan(cfg)) * cfg.train.batch_size * cfg.model.block_size
                    largest = max(largest, (tokens, f"{rung} {name} at budget {budget}"))
    return largest


@pytest.mark.parametrize("name", ["depth_ladder", "data_ladder", "depth_rivals"])
def test_the_studies_on_prose_never_pass_half_an_epoch(name):
    """The shipped studies that train on data=prose: their largest run sees under half of its training
    split, the epochs their yamls' Data comment states."""
    study = compose_study([f"study={name}"])
    assert "data=prose" in study.common
    tokens, which = _largest_run_tokens(study)
    epochs = tokens / PROSE_TRAIN_TOKENS
    assert epochs < 0.5, (which, epochs)
    comment = (REPO / "conf" / "study" / f"{name}.yaml").read_text()
    assert f"{tokens:,} tokens = {epochs:.2f} epochs" in comment, (which, tokens, epochs)


# ---------------------------------------------------------------------------------------------
# The study's own tuning: the frontier's space, edges, ties, bracketing, resume (no training: the runs'
# summaries are written by hand, the choice is the lowest mean loss on the selection seeds)

WIDE = """# @package _global_
defaults: [smoke]
name: wide
arms:
  control:
    experiment: schedule_control
    overrides: [multilevel.coarse_steps=2]
    grid: {optim.lr: [0.03, 0.3]}
frontier: {control_arm: control, warmup_fractions: [0.01, 0.045], lr_neighbours: true, max_budget: 3}
extra_selection_seeds: [100, 101]
grid_extensions: 1
"""


def wide_study(tmp_path, *overrides):
    own = tmp_path / "conf" / "study"
    own.mkdir(parents=True, exist_ok=True)
    (own / "wide.yaml").write_text(WIDE)
    cfg = compose_study(["study=wide", f"dir={tmp_path / 'study'}", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
                         *overrides])
    schema.check(cfg)
    return cfg


def finish(run, loss: float) -> None:
    run.dir.mkdir(parents=True, exist_ok=True)
    (run.dir / "summary.json").write_text(json.dumps({"status": "finished", "final_val_loss": loss}))


def test_the_frontier_tries_warmups_its_lr_neighbours_then_the_control_at_each_budgets_choice(tmp_path):
    from mltrain.tools.study import tuning
    from mltrain.tools.study.plan import control_sweeps

    cfg = wide_study(tmp_path, "grid_extensions=0")  # neighbours alone (an edge extension is tested below)
    layout = Layout(tmp_path / "study", {"d16": 100, "d32": 200})
    single = tuning_sweeps(cfg, layout, "d16")[0]
    assert dict(single.swept)["schedule.warmup_steps"] == ("1", "4")  # 1% and 4.5% of 100 steps
    assert len(single.runs()) == 2 * 2 * 3  # warm-up x LR x budget, on seed 0
    for run in single.runs():  # no near tie: the warm-ups apart by 0.1 nats
        finish(run, 2.0 + abs(float(run.setting["optim.lr"]) - 0.3) + 0.1 * (run.setting["schedule.warmup_steps"] == "1"))
    by_budget = {b: {"optim.lr": "0.3", "schedule.warmup_steps": "4"} for b in ("0.5", "1.0", "2.0")}
    more = tuning.more_sweeps(cfg, layout, "d16", 100, [single], {"single": Choice({}, by_budget)})
    planned = sorted((r.setting["train.budget"], r.setting["optim.lr"], r.seed) for s in more for r in s.runs())
    assert planned == sorted((b, lr, 0) for b in ("0.5", "1.0", "2.0") for lr in ("0.5196", "0.1732"))
    assert all(r.setting["schedule.warmup_steps"] == "4" for s in more for r in s.runs())
    # the neighbours lose: each budget's choice is settled, and the control's schedule runs there at the
    # frontier's chosen fine LR and warm-up (its own knob, the length, follows the budget)
    for run in (r for s in more for r in s.runs()):
        finish(run, 2.5)
    control = tuning.more_sweeps(cfg, layout, "d16", 100, [single, *more], {"single": Choice({}, by_budget)})
    assert all(s.dir.name == "control@frontier" and "experiment=schedule_control" in s.fixed for s in control)
    runs = sorted((r.setting["train.budget"], r.setting["multilevel.coarse_steps"], r.setting["optim.lr"],
                   r.setting["schedule.warmup_steps"], r.seed) for s in control for r in s.runs())
    assert runs == [("0.5", "1", "0.3", "4", 0), ("1.0", "2", "0.3", "4", 0), ("2.0", "4", "0.3", "4", 0)]
    # at the control arm's own fine LR and warm-up (d32 sets 2 steps), budget 1 and length 1 is its own runs' point
    own = control_sweeps(cfg, layout, "d32", 200, {b: {"optim.lr": "0.3", "schedule.warmup_steps": "2"}
                                                   for b in ("0.5", "1.0")})
    assert [dict(s.swept)["train.budget"] for s in own] == [("0.5",)]
    late = control_sweeps(cfg, layout, "d32", 200, {"1.0": {"optim.lr": "0.1", "schedule.warmup_steps": "2"}})
    assert [dict(s.swept)["optim.lr"] for s in late] == [("0.1",)]  # another fine LR: a point of its own


def test_an_arm_under_test_beyond_the_frontier_data_adds_the_next_budget_up_to_the_cap(tmp_path):
    from types import SimpleNamespace

    from mltrain.tools.study.tuning import next_budget

    cfg = wide_study(tmp_path)
    beyond = Report.from_json({"arms": [{"is_frontier": True, "multiplier": {}},
                                        {"is_frontier": False, "multiplier": {"extrapolated": True, "beyond_data": 1.6}}]})
    inside = Report.from_json({"arms": [{"is_frontier": False, "multiplier": {"extrapolated": False, "beyond_data": None}}]})
    bound = Report.from_json({"arms": [{"is_frontier": False, "multiplier": {"bound": {"kind": "lower"}}}]})
    assert next_budget(cfg, ["0.5", "1.0", "2.0"], beyond.arms) == "3.0"
    assert next_budget(cfg, ["0.5", "1.0", "2.0"], bound.arms) == "3.0"
    assert next_budget(cfg, ["0.5", "1.0", "2.0", "3.0"], beyond.arms) is None  # frontier.max_budget=3
    assert next_budget(cfg, ["0.5", "1.0", "2.0"], inside.arms) is None
    assert next_budget(wide_study(tmp_path, "frontier.max_budget=null"), ["1.0", "2.0"], beyond.arms) is None
    sweeps = tuning_sweeps(cfg, Layout(tmp_path, {"d16": 100}), "d16", budgets=["0.5", "1.0", "2.0", "3.0"])
    assert dict(sweeps[0].swept)["train.budget"] == ("0.5", "1.0", "2.0", "3.0")
    # the verdict lists the control's runs at the frontier's budgets as arms of their own: beyond the data
    # (a budget-2 run is), they are not arms under test and add no budget; the study's own arms do
    arms = [{"label": "multilevel,optim.lr=0.3", "run_kind": "multilevel", "multiplier": {}},
            {"label": "control,coarse_steps=4", "run_kind": "schedule_control", "multiplier": {"extrapolated": True}}]
    result = SimpleNamespace(comparison=Report.from_json({"arms": arms}))
    study = SimpleNamespace(cfg=cfg, labels={"d16": {"multilevel": "multilevel,optim.lr=0.3", "control": "control"}},
                            kinds={("d16", "multilevel"): "multilevel", ("d16", "control"): "schedule_control"})
    tested = stages._under_test(study, "d16", result)
    assert [a.label for a in tested if a is not None] == ["multilevel,optim.lr=0.3"]
    assert next_budget(cfg, ["0.5", "1.0", "2.0"], tested) is None
    assert next_budget(cfg, ["0.5", "1.0", "2.0"], result.comparison.arms) == "3.0"  # what reading every arm did


def test_a_choice_on_the_grid_edge_plans_one_more_value_beyond_it(tmp_path):
    from mltrain.tools.study import tuning

    cfg = wide_study(tmp_path)
    layout = Layout(tmp_path / "study", {"d16": 100})
    multilevel = tuning_sweeps(cfg, layout, "d16")[1]
    losses = {"0.03": 2.5, "0.3": 2.1}
    for run in multilevel.runs():
        finish(run, losses[run.setting["optim.lr"]])
    more = tuning.more_sweeps(cfg, layout, "d16", 100, [multilevel], {"multilevel": Choice({"optim.lr": "0.3"})})
    assert [(r.setting, r.seed) for s in more for r in s.runs()] == [({"optim.lr": "3.0"}, 0)]  # the grid's x10
    finish(more[0].runs()[0], 2.3)  # worse beyond: the grid brackets the choice now
    assert tuning.more_sweeps(cfg, layout, "d16", 100, [multilevel, *more], {"multilevel": Choice({"optim.lr": "0.3"})}) == []
    # ... and where the extension wins, the cap (grid_extensions=1) stops it
    assert tuning.edge_value(["0.03", "0.3"], ["0.03", "0.3", "3.0"], "3.0", 1) is None
    assert tuning.edge_value(["0.03", "0.3"], ["0.03", "0.3", "3.0"], "3.0", 2) == 30.0
    assert tuning.edge_value(["0.03", "0.1", "0.3"], ["0.03", "0.1", "0.3"], "0.1", 3) is None


def test_the_frontiers_warmup_chosen_at_an_end_of_the_lengths_tried_gets_one_beyond_no_longer_than_the_run(tmp_path):
    """The frontier's warm-up is tuned as a grid key is: a length chosen at the end of the fractions' lengths
    gets the next one at their ratio (here x4.5), capped at the run's steps at that budget; a length chosen
    inside, or at a halved budget (which follows the budget below), gets none."""
    from mltrain.tools.study import tuning

    cfg = wide_study(tmp_path, "frontier.warmup_fractions=[0.1,0.45]", "frontier.lr_neighbours=false")
    layout = Layout(tmp_path / "study", {"d16": 100})
    single = tuning_sweeps(cfg, layout, "d16")[0]
    assert dict(single.swept)["schedule.warmup_steps"] == ("10", "45")
    for run in single.runs():  # LR 0.3 best at every budget, inside nothing: the LR grid's own edge runs too
        finish(run, 2.0 + abs(float(run.setting["optim.lr"]) - 0.3) + 0.1 * (run.setting["schedule.warmup_steps"] == "10"))
    top = {b: {"optim.lr": "0.3", "schedule.warmup_steps": "45"} for b in ("0.5", "1.0", "2.0")}
    more = tuning.more_sweeps(cfg, layout, "d16", 100, [single], {"single": Choice({}, top)})
    warm = sorted((r.setting["train.budget"], r.setting["schedule.warmup_steps"]) for s in more for r in s.runs()
                  if r.setting["schedule.warmup_steps"] != "45")
    assert warm == [("0.5", "50"), ("1.0", "100"), ("2.0", "200")]  # 45 x 4.5 = 202, no longer than the run
    for run in (r for s in more for r in s.runs()):
        finish(run, 2.4)  # beyond loses: the lengths bracket the choice now
    assert not any(r.setting.get("schedule.warmup_steps") not in ("10", "45") for s in
                   tuning.more_sweeps(cfg, layout, "d16", 100, [single, *more], {"single": Choice({}, top)}) for r in s.runs())
    bottom = {"0.5": {"optim.lr": "0.3", "schedule.warmup_steps": "10"}}
    below = tuning._warmup_edge(cfg, {**bottom["0.5"], "train.budget": "0.5"}, ["10", "45"], ["10", "45"], 100)
    assert below == "2"  # 10 / 4.5
    inside = wide_study(tmp_path, "frontier.warmup_fractions=[0.1,0.3,0.45]")
    assert tuning._warmup_edge(inside, {"optim.lr": "0.3", "schedule.warmup_steps": "30", "train.budget": "1.0"},
                               ["10", "30", "45"], ["10", "30", "45"], 100) is None
    halved = wide_study(tmp_path, "frontier.warmup_fractions=[0.1,0.45]", "frontier.halving_from=0.5")
    assert tuning._warmup_edge(halved, {"optim.lr": "0.3", "schedule.warmup_steps": "45", "train.budget": "1.0"},
                               ["10", "45"], ["45"], 100) is None


def test_a_near_tie_runs_the_extra_selection_seeds_and_evaluates_the_runner_up(tmp_path):
    from mltrain.tools.study import tuning

    lrs = "optim.lr:[0.03,0.1,0.3]"
    cfg = wide_study(tmp_path, f"arms.multilevel.grid={{{lrs}}}", f"arms.control.grid={{{lrs}}}",
                     f"arms.single.grid={{{lrs},train.budget:[0.5,1.0,2.0]}}", "grid_extensions=0")
    layout = Layout(tmp_path / "study", {"d16": 100})
    multilevel = tuning_sweeps(cfg, layout, "d16")[1]
    for run, loss in zip(multilevel.runs(), [2.4, 2.10, 2.115]):  # 0.1 and 0.3 within 0.02 nats
        finish(run, loss)
    more = tuning.more_sweeps(cfg, layout, "d16", 100, [multilevel], {"multilevel": Choice({"optim.lr": "0.1"})})
    assert sorted((r.setting["optim.lr"], r.seed) for s in more for r in s.runs()) == [
        ("0.1", 100), ("0.1", 101), ("0.3", 100), ("0.3", 101)]
    for run, loss in zip([r for s in more for r in s.runs()], [2.14, 2.13, 2.10, 2.09]):
        finish(run, loss)
    table = tuning.losses([*multilevel.runs(), *(r for s in more for r in s.runs())])
    close = tuning.tied(table, table, [0], cfg.tie_nats)
    assert [dict(s)["optim.lr"] for s in close] == ["0.1", "0.3"]
    # on the mean over the three selection seeds 0.3 wins (2.102 against 2.123): the runner-up is 0.1
    assert dict(tuning.runner_up(table, close, [0, 100, 101], (("optim.lr", "0.3"),))) == {"optim.lr": "0.1"}
    apart = {(("optim.lr", "0.1"),): {0: 2.0}, (("optim.lr", "0.3"),): {0: 2.03}}
    assert tuning.tied(apart, apart, [0], 0.02) == []  # 0.03 nats apart: the selection seed decides
    sweeps = evaluation_sweeps(cfg, layout, "d16", {"multilevel": Choice({"optim.lr": "0.3"}, runner_up={"optim.lr": "0.1"})})
    runs = {(r.sweep.dir.name, r.setting["optim.lr"], r.seed) for s in sweeps for r in s.runs()}
    assert runs == {("multilevel", "0.3", 1), ("multilevel", "0.3", 2),
                    ("multilevel@runner_up", "0.1", 1), ("multilevel@runner_up", "0.1", 2)}


def test_extra_selection_seeds_must_be_apart_from_the_others(tmp_path, capsys):
    code, _, err = run_main("study=smoke", f"dir={tmp_path / 'study'}", "extra_selection_seeds=[2,100]", capsys=capsys)
    assert code == 2 and "extra_selection_seeds [2] also in selection_seeds or the evaluation seeds" in err
    code, _, err = run_main("study=smoke", f"dir={tmp_path / 'study'}", "frontier.control_arm=nope", capsys=capsys)
    assert code == 2 and "frontier.control_arm=nope: name one of the study's other arms (multilevel)" in err


def test_a_study_invoked_again_over_its_finished_runs_plans_nothing_new(tmp_path, monkeypatch):
    import io
    import math

    from mltrain.tools.study.progress import Progress, ended, run_status

    cfg = wide_study(tmp_path)
    sizes = {"d16": compose.ScaleSize(1000, 100, 64), "d32": compose.ScaleSize(2000, 100, 64)}
    kinds = {(scale, arm): "single" if arm == "single" else "multilevel" for scale in sizes for arm in cfg.arms}
    study = stages.Study(cfg, Layout(tmp_path / "study", {"d16": 100, "d32": 100}), sizes, kinds, {}, None,
                         progress=Progress(io.StringIO(), 0, 0, 0.0))
    launched = []

    def loss(run) -> float:  # a bowl in log LR around 0.2 (shallow off the frontier); the shorter warm-up better
        s, steep = run.setting, 0.05 if run.sweep.dir.name == "single" else 0.005
        return (2.0 + steep * abs(math.log(float(s["optim.lr"]) / 0.2)) - 0.1 * float(s.get("train.budget", 1.0))
                - 0.003 * (s.get("schedule.warmup_steps") == "1") + 0.001 * (run.seed % 7))

    def fake_launch(study, sweeps):
        pending = [r for s in sweeps for r in s.runs() if not ended(run_status(r.dir))]
        launched.extend(pending)
        for run in pending:
            finish(run, loss(run))

    def fake_compare(paths, select_seeds, tune, **_):  # the lowest mean on the selection seeds, per budget
        rows = {}
        for p in paths:
            parts = dict(kv.split("=", 1) for kv in Path(p).name.split(","))
            if int(parts.pop("seed")) in select_seeds:
                loss_ = json.loads((Path(p) / "summary.json").read_text())["final_val_loss"]
                rows.setdefault(tuple(sorted(parts.items())), []).append(loss_)
        best = {}
        for setting, ls in rows.items():
            b = dict(setting).get("train.budget", "1.0")
            best[b] = min(best.get(b, (math.inf, None)), (sum(ls) / len(ls), setting))
        pick = {b: {k: v for k, v in s if k in tune} for b, (_, s) in best.items()}
        return Report.from_json({"arms": [{"label": "x", "selected": pick[max(pick, key=float)], "selected_by_budget": pick}]})

    monkeypatch.setattr(stages, "_launch", fake_launch)
    monkeypatch.setattr(stages, "_compare", fake_compare)
    budgets = ["0.5", "1.0", "2.0"]
    sweeps, choices = stages._tune(study, "d16", budgets)
    ran = {(r.sweep.dir.name, tuple(sorted(r.setting.items())), r.seed) for r in launched}
    assert ("single", (("optim.lr", "0.5196"), ("schedule.warmup_steps", "1"), ("train.budget", "1.0")), 0) in ran
    assert any(name == "control@frontier" for name, _, _ in ran) and any(seed == 100 for _, _, seed in ran)
    assert choices["single"].by_budget["1.0"] == {"optim.lr": "0.1732", "schedule.warmup_steps": "1"}
    assert choices["multilevel"].runner_up  # its settings lie within 0.02 nats of each other
    launched.clear()
    again, same = stages._tune(study, "d16", budgets)
    assert launched == [] and same == choices
    assert {r.dir for s in again for r in s.runs()} == {r.dir for s in sweeps for r in s.runs()}
    found, distrusted = stages.read_choices(cfg, study.layout, "d16")
    assert distrusted == [] and found == choices


def test_the_planned_evaluation_counts_every_frontier_budget_though_stage_1_composed_only_the_first(tmp_path):
    """Under successive halving only budget 0.5's single-level settings are composed before stage 1 chooses;
    the ETA's planned evaluation FLOPs still hold each budget of the frontier's grid (a run's cost follows
    its budget), as the run count does, and every other arm at its mean setting."""
    cfg = wide_study(tmp_path, "frontier.halving_from=0.5")
    study = stages.Study(cfg, Layout(tmp_path / "study", {"d16": 100}), {}, {}, {}, None)
    costs = [("single", {"optim.lr": lr, "train.budget": "0.5", "schedule.warmup_steps": w}, 5.0)
             for lr in ("0.03", "0.3") for w in ("1", "4")]
    costs += [("multilevel", {"optim.lr": "0.03"}, 6.0), ("multilevel", {"optim.lr": "0.3"}, 8.0),
              ("control", {"optim.lr": "0.03"}, 7.0), ("control", {"optim.lr": "0.3"}, 7.0)]
    for arm, setting, cost in costs:
        key = ("d16", *compose.setting_key(arm, setting))
        study.configs[key], study.costs[key] = None, cost  # type: ignore[assignment]  # the cost alone is read
    seeds = 2  # the smoke study's evaluation seeds
    assert stages._evaluation_cost(study, "d16") == seeds * (10.0 * (0.5 + 1.0 + 2.0) + 7.0 + 7.0)
