"""A stand-in for `mltrain.tools.compare.compare_dirs`, for the study tests that are about launching,
resuming and reporting rather than about the verdict: it returns the verdict's documented shape from
the runs on disk, choosing the setting with the lowest mean final held-out loss on the selection seeds,
and leaves the multiplier unavailable. The real verdict is tested in the compare tests, and the study's
end-to-end test uses it whenever it is there."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from mltrain.runs.keys import BUDGET_KEY, SEED_KEY, override_key, override_value
from mltrain.runs.names import run_label


def _runs(paths: list) -> list[dict]:
    runs = []
    for path in paths:
        for summary_path in sorted(Path(path).rglob("summary.json")):
            summary = json.loads(summary_path.read_text())
            overrides = list(OmegaConf.load(summary_path.parent / ".hydra" / "overrides.yaml"))
            runs.append({"summary": summary, "overrides": overrides,
                         "values": {override_key(o): override_value(o) for o in overrides
                                    if override_value(o) is not None}})
    return runs


def _best(runs: list[dict], tune: list[str], seeds: list) -> dict:
    by_setting: dict[tuple, list[float]] = {}
    for r in runs:
        if r["summary"]["seed"] in seeds and r["summary"]["status"] == "finished":
            setting = tuple((k, float(r["values"][k])) for k in tune if k in r["values"])
            by_setting.setdefault(setting, []).append(r["summary"]["final_val_loss"])
    return dict(min(by_setting, key=lambda s: np.mean(by_setting[s]))) if by_setting else {}


def compare_dirs(paths, out=None, select_seeds=None, tune=(), plot=True) -> dict:
    select_seeds, tune = list(select_seeds or []), list(tune)
    groups: dict[str, list[dict]] = {}
    for r in _runs(paths):
        kept = [o for o in r["overrides"] if override_key(o) not in {*tune, BUDGET_KEY, SEED_KEY}]
        groups.setdefault(run_label(kept, r["summary"]["run_kind"]), []).append(r)
    arms = []
    for label, runs in groups.items():
        kind = runs[0]["summary"]["run_kind"]
        budgets = sorted({r["summary"]["budget"] for r in runs})
        by_budget = {str(b): _best([r for r in runs if r["summary"]["budget"] == b], tune, select_seeds)
                     for b in budgets} if kind == "single" else {}
        selected = by_budget.get("1.0") or _best(runs, tune, select_seeds)
        chosen = [r for r in runs if r["summary"]["seed"] not in select_seeds and r["summary"]["budget"] == 1.0
                  and all(float(r["values"].get(k, "nan")) == v for k, v in selected.items())]
        losses = [r["summary"]["final_val_loss"] for r in chosen]
        arms.append({
            "arm": label, "label": label, "run_kind": kind, "settings_tried": len({tuple(r["values"].get(k) for k in tune) for r in runs}),
            "selection_seeds": select_seeds, "eval_seeds": sorted({r["summary"]["seed"] for r in chosen}),
            "selected": selected, "selected_by_budget": by_budget,
            "final_val_loss": {"mean": float(np.mean(losses)) if losses else None, "n": len(losses)},
            "multiplier": {"available": False, "why": "stand-in verdict"},
        })
    report = {"arms": arms, "frontier": {"points": [], "fit": {"available": False, "why": "stand-in"}},
              "warnings": [], "optimistic": not select_seeds}
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "comparison.json").write_text(json.dumps(report, indent=1, sort_keys=True))
        (Path(out) / "comparison.md").write_text("stand-in verdict\n")
    return report
