"""mltrain-compare on synthetic run directories whose answers are known by hand; it imports neither
torch nor wandb."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mltrain.tools.compare import main
from mltrain.tools.compare.statistics import first_reach, moving_average


def test_compare_imports_neither_torch_nor_wandb():
    code = ("import sys, mltrain.console, mltrain.tools.compare.cli, mltrain.runs.files, mltrain.runs.names\n"
            "heavy = sorted(m for m in ('torch', 'wandb') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


A, B = 10.0, 0.2
N = 100
F_TOTAL = N * 1e12
ML = "coarsening=evenodd,multilevel.delta=0.5"
ML2 = "coarsening=evenodd,multilevel.delta=0.25"
CTRL = "coarsening=evenodd,multilevel.control=schedule,multilevel.delta=0.5"


def loss(flops: float, k: float, off: float) -> float:
    return A + off - B * math.log(k * flops)


def make_run(root: Path, name: str, kind: str, label: str | None, seed: int, k: float, off: float = 0.0,
             val_gap: float = 0.05, overrides: list[str] | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    rows = [{"step": 0, "flops": 0.0, "tokens": 0, "time_s": 0.0, "val/loss": 11.0, "level": 0}]
    for i in range(1, N + 1):
        f = i * 1e12
        rows.append({"step": i, "flops": f, "tokens": i * 100, "time_s": i * 0.1, "train/loss": loss(f, k, off),
                     "lr": 1e-3, "level": 0, "phase": "fine"})
        if kind == "multilevel" and i <= 20:
            # coarse rows: another model's (much lower) loss; must not count for the fine curve
            rows.append({"step": i, "flops": f + 1e11, "tokens": i * 100, "time_s": 0.0, "train/loss": 0.01,
                         "lr": 1e-3, "level": 1, "phase": "coarse", "coarse_model": 0, "cycle": i})
            rows.append({"step": i, "flops": f + 1e11, "tokens": i * 100, "time_s": 0.0, "diag/coarse_loss": 0.01,
                         "diag/fine_loss": 5.0, "diag/grad_cosine": 0.3, "cycle": i, "coarse_model": 0, "level": 1})
        if i % 10 == 0:
            rows.append({"step": i, "flops": f, "tokens": i * 100, "time_s": 0.0,
                         "val/loss": loss(f, k, off) + val_gap, "level": 0})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {"run_kind": kind, "seed": seed, "total_flops": F_TOTAL, "coarsening": "evenodd",
               "delta": 0.5, "final_val_loss": rows[-1]["val/loss"]}
    if label is not None:
        summary["label"] = label
    (d / "summary.json").write_text(json.dumps(summary))
    if overrides is not None:
        (d / ".hydra").mkdir()
        (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return d


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / "sweep"
    for s in (0, 1, 2):
        make_run(root, f"single_s{s}", "single", "default", s, k=1.0, off=0.01 * s)
    # multilevel delta=0.5: 2x, 5x and 1.25x as efficient -> savings 0.5, 0.8, 0.2 (paired, same offsets)
    for s, k in ((0, 2.0), (1, 5.0), (2, 1.25)):
        make_run(root, f"ml_s{s}", "multilevel", ML, s, k=k, off=0.01 * s)
    # multilevel delta=0.25: seed 0 2x; seed 1 never gets there (stays 1.0 above)
    make_run(root, "ml2_s0", "multilevel", ML2, 0, k=2.0)
    make_run(root, "ml2_s1", "multilevel", ML2, 1, k=1.0, off=1.0)
    # schedule control: 1.6x as efficient as the baseline
    for s in (0, 1):
        make_run(root, f"ctrl_s{s}", "schedule_control", CTRL, s, k=1.6, off=0.01 * s)
    return root


def run_cli(args, capsys) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _entry(report: dict, section: str, label: str) -> dict:
    (e,) = [e for e in report[section] if e["label"] == label]
    return e


# ---------------------------------------------------------------------------------------------
# pieces


def test_moving_average_is_trailing_over_the_last_n_rows():
    np.testing.assert_allclose(moving_average(np.array([1.0, 2.0, 3.0, 4.0]), 2), [1.0, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(moving_average(np.array([4.0, 2.0, 6.0]), 5), [4.0, 3.0, 4.0])
    np.testing.assert_allclose(moving_average(np.array([3.0, 1.0]), 1), [3.0, 1.0])


def test_first_reach_interpolates_between_rows_and_reports_not_reached():
    f = np.array([0.0, 10.0, 20.0, 30.0])
    loss = np.array([5.0, 4.0, 2.0, 1.0])
    assert first_reach(f, loss, 3.0) == pytest.approx(15.0)
    assert first_reach(f, loss, 4.0) == pytest.approx(10.0)
    assert first_reach(f, loss, 6.0) == 0.0
    assert first_reach(f, loss, 0.5) is None
    assert first_reach(np.array([]), np.array([]), 1.0) is None


# ---------------------------------------------------------------------------------------------
# the report


def test_savings_per_seed_mean_std_and_grouping(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    rc, stdout, err = run_cli([sweep, "--smooth", "1", "--out", out], capsys)
    assert rc == 0, err
    report = json.loads((out / "comparison.json").read_text())
    # grouping by label + run_kind: seeds of one configuration together
    confs = {(c["run_kind"], c["label"]): c for c in report["configurations"]}
    assert set(confs) == {("single", "default"), ("multilevel", ML), ("multilevel", ML2),
                          ("schedule_control", CTRL)}
    assert confs[("multilevel", ML)]["seeds"] == [0, 1, 2]
    assert confs[("single", "default")]["is_baseline"]
    assert report["baseline"] == {"label": "default", "run_kind": "single", "seeds": [0, 1, 2]}

    ml = _entry(report, "vs_baseline", ML)
    for metric in ("train", "val"):
        per = {e["seed"]: e[metric] for e in ml["per_seed"]}
        for seed, k in ((0, 2.0), (1, 5.0), (2, 1.25)):
            assert per[seed]["reached"]
            assert per[seed]["flops"] == pytest.approx(F_TOTAL / k, rel=1e-9)
            assert per[seed]["reference_flops"] == pytest.approx(F_TOTAL, rel=1e-9)
            assert per[seed]["saving"] == pytest.approx(1 - 1 / k, abs=1e-9)
            assert per[seed]["target"] == pytest.approx(loss(F_TOTAL, 1.0, 0.01 * seed) + (0.05 if metric == "val" else 0))
        agg = ml[metric]
        assert agg["n_runs"] == 3 and agg["n_reached"] == 3
        assert agg["mean_saving"] == pytest.approx(np.mean([0.5, 0.8, 0.2]), abs=1e-9)
        assert agg["std_saving"] == pytest.approx(np.std([0.5, 0.8, 0.2], ddof=1), abs=1e-9)
        assert agg["mean_flops"] == pytest.approx(np.mean([F_TOTAL / 2, F_TOTAL / 5, F_TOTAL / 1.25]), rel=1e-9)
    assert all(e["paired"] for e in ml["per_seed"])

    # stdout is the markdown, also in comparison.md
    md = (out / "comparison.md").read_text()
    assert stdout.strip() == md.strip()
    assert md.startswith("# mltrain comparison")
    assert "Command: `mltrain-compare " in md and "--smooth 1" in md
    assert "50.0%" in md and "80.0%" in md and "20.0%" in md
    # mean and the 95% t interval of 50, 80, 20: 50 ± t(0.975, 2) * 30 / sqrt(3), which contains 0
    half = 4.302652729911275 * 0.3 / math.sqrt(3)
    assert f"50.0% [{100 * (0.5 - half):.1f}%, {100 * (0.5 + half):.1f}%] (n=3) !" in md
    assert "the 95% interval contains 0" in md


def test_not_reached_is_reported_and_excluded_from_the_mean(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli([sweep, "--smooth", "1", "--out", out], capsys)[0] == 0
    report = json.loads((out / "comparison.json").read_text())
    ml2 = _entry(report, "vs_baseline", ML2)
    per = {e["seed"]: e for e in ml2["per_seed"]}
    for metric in ("train", "val"):
        assert per[0][metric]["saving"] == pytest.approx(0.5, abs=1e-9)
        assert per[1][metric] == {**per[1][metric], "reached": False, "flops": None, "saving": None}
        assert ml2[metric]["n_reached"] == 1 and ml2[metric]["n_runs"] == 2
        assert ml2[metric]["mean_saving"] == pytest.approx(0.5, abs=1e-9)
        assert ml2[metric]["std_saving"] is None  # one seed: no std
    md = (out / "comparison.md").read_text()
    assert "not reached" in md and "(1/2 reached)" in md


def test_schedule_control_is_compared_both_ways(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli([sweep, "--smooth", "1", "--out", out], capsys)[0] == 0
    report = json.loads((out / "comparison.json").read_text())
    # the control itself against the single-level baseline: 1.6x -> saving 1 - 1/1.6
    ctrl = _entry(report, "vs_baseline", CTRL)
    assert ctrl["run_kind"] == "schedule_control"
    assert ctrl["train"]["mean_saving"] == pytest.approx(1 - 1 / 1.6, abs=1e-4)
    # multilevel against the control's own final loss: control ends at loss(F_TOTAL, 1.6); a 2x run
    # gets there at F_TOTAL * 1.6 / 2 = 0.8 F_TOTAL -> saving 0.2
    vc = _entry(report, "vs_control", ML)
    assert vc["reference"]["label"] == CTRL and vc["reference"]["run_kind"] == "schedule_control"
    assert "label" in vc["reference"]["matched_by"]
    per = {e["seed"]: e for e in vc["per_seed"]}
    assert per[0]["paired"] and per[1]["paired"] and not per[2]["paired"]  # control has seeds 0, 1 only
    assert per[0]["train"]["saving"] == pytest.approx(0.2, abs=1e-9)
    assert per[0]["val"]["saving"] == pytest.approx(0.2, abs=1e-9)
    assert per[1]["train"]["saving"] == pytest.approx(1 - 1.6 / 5, abs=1e-9)
    # seed 2 has no control partner: mean control target (offset 0.005), curve offset 0.02, k = 1.25
    target = loss(F_TOTAL, 1.6, 0.005)
    expected_f = math.exp((A + 0.02 - target) / B) / 1.25
    assert expected_f > F_TOTAL  # ... which is past the end of its run: not reached
    assert per[2]["train"]["target"] == pytest.approx(target)
    assert per[2]["train"]["reached"] is False and per[2]["train"]["flops"] is None
    assert vc["train"]["n_reached"] == 2 and vc["train"]["n_runs"] == 3
    # the delta=0.25 configuration has no exactly matching control; the only control is used
    vc2 = _entry(report, "vs_control", ML2)
    assert vc2["reference"]["matched_by"] == "the only schedule control"
    assert "vs schedule control" in (out / "comparison.md").read_text()


def test_unpaired_seed_uses_the_baseline_mean_target(tmp_path, capsys):
    root = tmp_path / "runs"
    make_run(root, "b0", "single", "default", 0, k=1.0, off=0.0)
    make_run(root, "b1", "single", "default", 1, k=1.0, off=0.02)
    make_run(root, "m7", "multilevel", ML, 7, k=2.0, off=0.01)  # seed 7: no baseline partner
    assert run_cli([root, "--smooth", "1"], capsys)[0] == 0
    report = json.loads((root / "comparison.json").read_text())  # default --out: the folder given
    (e,) = _entry(report, "vs_baseline", ML)["per_seed"]
    assert not e["paired"]
    assert e["train"]["target"] == pytest.approx(loss(F_TOTAL, 1.0, 0.01))
    assert e["train"]["saving"] == pytest.approx(0.5, abs=1e-9)
    assert "| 7* |" in (root / "comparison.md").read_text()


def test_smoothing_uses_only_fine_rows(tmp_path, capsys):
    root = tmp_path / "runs"
    make_run(root, "b0", "single", "default", 0, k=1.0)
    make_run(root, "m0", "multilevel", ML, 0, k=2.0)
    assert run_cli([root, "--smooth", "5", "--out", tmp_path / "o"], capsys)[0] == 0
    report = json.loads((tmp_path / "o" / "comparison.json").read_text())
    assert report["smooth"] == 5 and "moving average" in report["smoothing"]
    (base,) = [c for c in report["configurations"] if c["is_baseline"]][0]["runs"]
    expected = np.mean([loss(i * 1e12, 1.0, 0.0) for i in range(N - 4, N + 1)])
    assert base["final_train_loss_smoothed"] == pytest.approx(expected)
    (e,) = _entry(report, "vs_baseline", ML)["per_seed"]
    # the coarse rows (loss 0.01 early on) would "reach" any target at once if they were counted
    assert 0.45 < e["train"]["saving"] < 0.55


def test_png_written_and_json_schema(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli([sweep, "--logx", "--out", out], capsys)[0] == 0
    png = (out / "comparison.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    report = json.loads((out / "comparison.json").read_text())
    assert {"command", "smooth", "smoothing", "pairing", "interval_method", "baseline", "configurations",
            "vs_baseline", "vs_control", "frontier", "vs_frontier", "fixed_flops", "held_out", "excluded",
            "verdict", "outputs", "arms", "warnings", "optimistic"} <= set(report)
    assert report["outputs"]["png"] == str(out / "comparison.png")
    for e in report["vs_baseline"] + report["vs_control"]:
        assert {"label", "run_kind", "reference", "per_seed", "train", "val"} <= set(e)
        for s in e["per_seed"]:
            assert {"seed", "run", "paired", "train", "val"} <= set(s)
            for m in ("train", "val"):
                assert {"target", "reference_flops", "flops", "reached", "saving"} <= set(s[m])
        for m in ("train", "val"):
            assert {"n_runs", "n_reached", "mean_flops", "std_flops", "mean_saving", "std_saving",
                    "saving_interval", "saving_blocks_interval", "loss_diff_interval"} == set(e[m])


def test_label_falls_back_to_hydra_overrides(tmp_path, capsys):
    root = tmp_path / "runs"
    make_run(root, "b0", "single", None, 0, k=1.0, overrides=["seed=0", "multilevel.delta=0.5"])
    make_run(root, "m0", "multilevel", None, 0, k=2.0, overrides=["seed=0", "coarsening=evenodd"])
    make_run(root, "m1", "multilevel", None, 1, k=2.0, overrides=["coarsening=evenodd", "seed=1"])
    assert run_cli([root / "b0", root / "m0", root / "m1", "--smooth", "1"], capsys)[0] == 0
    report = json.loads((root / "comparison.json").read_text())  # common parent of the run dirs
    assert report["baseline"]["label"] == "default"
    assert _entry(report, "vs_baseline", "coarsening=evenodd")["train"]["n_reached"] == 2


# ---------------------------------------------------------------------------------------------
# CLI errors: non-zero exit, one line


def _one_line_error(rc, out, err, text):
    assert rc != 0 and out == ""
    assert len(err.strip().splitlines()) == 1 and text in err, err


def test_error_no_run_dirs(tmp_path, capsys):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    _one_line_error(*run_cli([tmp_path / "empty"], capsys), "no run directories")
    _one_line_error(*run_cli([tmp_path / "missing"], capsys), "no such file or directory")
    _one_line_error(*run_cli([], capsys), "--wandb")


def test_no_baseline_is_a_warning_and_single_level_settings_form_one_frontier(tmp_path, capsys):
    root = tmp_path / "runs"
    make_run(root, "m0", "multilevel", ML, 0, k=2.0)
    rc, out, err = run_cli([root], capsys)
    assert rc == 0 and "mltrain-compare: warning: no baseline: no usable single-level run" in err
    report = json.loads((root / "comparison.json").read_text())
    assert report["baseline"] is None and report["arms"][0]["run_kind"] == "multilevel"
    make_run(root, "b0", "single", "optim.lr=0.1", 0, k=1.0)
    make_run(root, "b1", "single", "optim.lr=0.2", 0, k=1.0, off=-0.01)
    rc, out, err = run_cli([root, "--smooth", "1"], capsys)
    assert rc == 0, err
    report = json.loads((root / "comparison.json").read_text())
    assert report["baseline"]["label"] == "optim.lr=0.2"  # the better of the two single-level settings
    (single,) = [a for a in report["arms"] if a["run_kind"] == "single"]
    assert single["settings_tried"] == 2 and single["selected"] == {"optim.lr": 0.2}
    _one_line_error(*run_cli([root, "--baseline", "nope"], capsys), "no baseline found")
    rc, out, err = run_cli([root, "--baseline", "optim.lr=0.1", "--smooth", "1"], capsys)
    assert rc == 0, err
    report = json.loads((root / "comparison.json").read_text())
    assert report["baseline"]["label"] == "optim.lr=0.1"
    assert _entry(report, "vs_baseline", ML)["train"]["mean_saving"] == pytest.approx(0.5, abs=1e-9)


def test_error_unreadable_summary(tmp_path, capsys):
    root = tmp_path / "runs"
    make_run(root, "b0", "single", "default", 0, k=1.0)
    bad = make_run(root, "b1", "single", "default", 1, k=1.0)
    (bad / "summary.json").write_text('{"run_kind": "sing')
    _one_line_error(*run_cli([root], capsys), "unreadable summary")


def test_usage_errors_return_nonzero(tmp_path, capsys):
    assert main(["--smooth", "abc"]) == 2
    assert main(["--help"]) == 0
    capsys.readouterr()
    root = tmp_path / "runs"
    make_run(root, "b0", "single", "default", 0, k=1.0)
    _one_line_error(*run_cli([root, "--smooth", "0"], capsys), "--smooth")


def test_wandb_source_fails_cleanly_offline(tmp_path, monkeypatch, capsys):
    for var in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    import wandb

    wandb.teardown()
    _one_line_error(*run_cli(["--wandb", "someone/mltrain", "--group", "default", "--out", tmp_path / "o"], capsys),
                    "W&B: cannot list runs")
    _one_line_error(*run_cli(["--wandb", "someone/mltrain", tmp_path], capsys), "not both")


class _FakeWandbRun:
    """A W&B run as the public API hands it: its summary, and its history by the keys asked for (a row has
    every key asked for, as scan_history gives it); `old`: logged before `level` and `flops_blocks`."""

    def __init__(self, name, seed, state="finished", old=False):
        self.path, self.group, self.config, self.state, self.old = ["team", "mltrain", name], "default", {"seed": seed}, state, old
        self.summary = {"run_kind": "multilevel", "label": "coarsening=evenodd", "seed": seed, "_runtime": 1}
        train = [{"_step": i, "flops": 1e12 * i, "flops_blocks": 5e11 * i, "train/loss": 4.0 - i, "level": 0}
                 for i in (1, 2, 3)]
        val = [{"_step": 10 * i, "flops": 2e12 * i, "flops_blocks": 1e12 * i, "val/loss": 3.5 - i} for i in (1, 2)]
        self.rows = train + val

    def scan_history(self, keys, page_size):
        if self.old and ("level" in keys or "flops_blocks" in keys):
            return iter([])
        return iter([{k: r[k] for k in [*keys, "_step"]} for r in self.rows if all(k in r for k in keys)])


def test_wandb_runs_are_read_from_their_history_new_and_old(monkeypatch):
    import types

    from mltrain.tools.compare.loading import load_wandb_runs

    fakes = [_FakeWandbRun("a", 0), _FakeWandbRun("b", 1, old=True), _FakeWandbRun("c", 2, state="running")]
    asked = {}
    api = types.SimpleNamespace(runs=lambda path, filters: asked.update(path=path, filters=filters) or fakes)
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(Api=lambda timeout: api))
    runs = load_wandb_runs("team/mltrain", "default", ["config.seed=1", "state=finished"])
    assert asked == {"path": "team/mltrain", "filters": {"group": "default", "config.seed": 1, "state": "finished"}}
    assert [(r.source, r.seed, r.status) for r in runs] == [
        ("wandb:team/mltrain/a", 0, "finished"), ("wandb:team/mltrain/b", 1, "finished"),
        ("wandb:team/mltrain/c", 2, "unfinished")]
    new, old = runs[0], runs[1]
    assert new.train.flops.tolist() == [1e12, 2e12, 3e12] and new.val.loss.tolist() == [2.5, 1.5]
    assert new.train.flops_blocks.tolist() == [5e11, 1e12, 1.5e12] and new.summary == {
        "run_kind": "multilevel", "label": "coarsening=evenodd", "seed": 0}
    assert old.train.loss.tolist() == [3.0, 2.0, 1.0] and old.train.flops_blocks is None  # the bare FLOPs rows
