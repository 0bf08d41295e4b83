"""A study warns in one line when any of its runs trained on more than one epoch of its data."""

import json

from mltrain.tools.study.cli import compose_study
from mltrain.tools.study.plan import TUNE, Layout, tuning_sweeps
from mltrain.tools.study.sanity import repeated_data


def _runs_with_epochs(tmp_path, epochs):
    cfg = compose_study(["study=smoke", f"dir={tmp_path}"])
    layout = Layout(tmp_path)
    runs = tuning_sweeps(cfg, layout, "d16")[0].runs()
    for run, e in zip(runs, epochs):
        run.dir.mkdir(parents=True)
        (run.dir / "summary.json").write_text(json.dumps({"status": "finished", "epochs": e}))
    return cfg, layout


def test_runs_past_one_epoch_are_counted_in_one_line(tmp_path):
    cfg, layout = _runs_with_epochs(tmp_path, [0.4, 1.25, 1.62, 1.0])
    line = repeated_data(cfg, layout)
    assert line == ("warning: 2 run(s) of smoke saw their training data more than once (up to 1.62 epochs); "
                    "use a larger corpus (data=prose, or your own: data=text data.path=...)")


def test_no_warning_within_one_epoch_or_without_the_field(tmp_path):
    cfg, layout = _runs_with_epochs(tmp_path, [0.4, 1.0, None])
    assert repeated_data(cfg, layout) is None


def test_a_folder_the_config_does_not_ask_for_is_not_counted(tmp_path):
    cfg, layout = _runs_with_epochs(tmp_path, [0.5])
    stray = layout.sweep("d16", TUNE, "single") / "lr=9"
    stray.mkdir(parents=True)
    (stray / "summary.json").write_text(json.dumps({"status": "finished", "epochs": 3.0}))
    assert repeated_data(cfg, layout) is None
