"""A NaN reproduction through mltrain: the diverged run is reported as diverged, with no saving."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import report_of, typed


def test_a_nan_reproduction_is_reported_as_diverged_with_no_saving(tmp_path, capsys):
    """`mltrain scale=smoke` and `mltrain scale=smoke coarsening=evenodd optim.lr=1e30` into one folder."""
    from helpers import compose_config

    from mltrain.run import RunDiverged, run

    root = tmp_path / "runs"
    run(typed(compose_config("scale=smoke", "train.progress=false", tiny=False)), run_dir=root / "single")
    with pytest.raises(RunDiverged):  # stopped at the first non-finite loss (train.on_nonfinite=stop)
        run(typed(compose_config("scale=smoke", "coarsening=evenodd", "optim.lr=1e30", "train.progress=false", tiny=False)),
            run_dir=root / "ml")
    report, md = report_of(root, capsys)
    (e,) = report["excluded"]
    assert Path(e["run"]).name == "ml" and e["status"] == "diverged" and e["reason"]
    assert report["vs_baseline"] == [] and report["verdict"] == []  # no saving of any kind
    assert "**diverged**" in md and "%" not in md.split("## Left out")[0].split("## Verdict")[1]
