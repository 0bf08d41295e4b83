"""The report's per-configuration numbers, every seed of every configuration (the arms' verdict on
evaluation seeds apart is in `verdict`).

* **vs the one baseline** (the old figure, kept and named as such): FLOPs a run needs to reach the
  single-level baseline's final loss, saving = 1 - F / F_ref, train and val.
* **vs the tuned frontier's points** (held-out loss; see `frontier`): for each run the single-level
  FLOPs F* that reach its final val loss on its seed's envelope (linear in log FLOPs between points;
  "outside the frontier" beyond its ends, then only a bound). saving = 1 - F_run / F*. Also under the
  blocks-only FLOP convention, and the loss gap at equal FLOPs: final val loss - the frontier's there.
* **vs the schedule control**: as vs the baseline, against the control's final loss.
* **held-out loss at fixed FLOPs** (fractions of the baseline's total FLOPs), with paired differences.
* **intervals**: per configuration over seeds, paired by seed (see statistics.interval).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

import numpy as np

from mltrain.method.kinds import RunKind
from mltrain.runs.keys import label_overrides
from mltrain.tools.compare.frontier import Frontier
from mltrain.tools.compare.loading import CompareError, Configuration, Run, mismatch
from mltrain.tools.compare.statistics import (
    first_reach,
    frontier_flops,
    frontier_loss,
    interval,
    value_at,
)

METRICS = ("train", "val")
FLOP_FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # of the baseline's total FLOPs


def _mean(values: Iterable[Optional[float]]) -> Optional[float]:
    v = [x for x in values if x is not None]
    return float(np.mean(v)) if v else None


def _std(values: Iterable[Optional[float]]) -> Optional[float]:
    v = [x for x in values if x is not None]
    return float(np.std(v, ddof=1)) if len(v) > 1 else None


def _by_seed(runs: Iterable[Run]) -> dict[Any, Run]:
    out: dict[Any, Run] = {}
    for r in runs:
        if r.seed is not None:
            out.setdefault(r.seed, r)
    return out


def _paired_interval(entries: list[dict], value: str, zero_means: str) -> dict:
    """Interval of `value` over the paired entries that have one; when none is paired, over all of
    them, with a warning that they are not paired."""
    paired = [e[value] for e in entries if e["paired"] and e.get(value) is not None]
    if paired:
        out = interval(paired, zero_means).as_dict()
        unpaired = sum(1 for e in entries if not e["paired"] and e.get(value) is not None)
        if unpaired:
            out["warnings"].append(f"{unpaired} seed(s) without a partner of the same seed left out")
        return out
    out = interval([e[value] for e in entries if e.get(value) is not None], zero_means).as_dict()
    if out["n"]:
        out["warnings"].append("no seed has a partner of the same seed: not a paired comparison")
    return out


# ---------------------------------------------------------------------------------------------
# Choosing the references


def choose_baseline(configs: list[Configuration], label: str | None, kept: list[Configuration]) -> Optional[Configuration]:
    """--baseline LABEL; else, of the settings the single-level arms kept at their largest budget
    (`kept`), the one with the lowest mean final val loss; None when there is no single-level run."""
    if label is not None:
        matches = [c for c in configs if c.label == label]
        if len(matches) > 1:
            singles = [c for c in matches if c.run_kind == RunKind.single]
            if len(singles) == 1:
                return singles[0]
            raise CompareError(
                f"--baseline {label!r} matches several configurations: {', '.join(c.name for c in matches)}"
            )
        if not matches:
            raise CompareError(f"no baseline found: no usable configuration labelled {label!r} (have: {names(configs)})")
        return matches[0]
    scored = [(_mean(r.final("val") for r in c.runs), i, c) for i, c in enumerate(kept)]
    scored = [t for t in scored if t[0] is not None]
    return min(scored, key=lambda t: t[:2])[2] if scored else None


def names(configs: Iterable[Configuration]) -> str:
    return "; ".join(c.name for c in configs) or "nothing"


def _strip_control(label: str) -> str:
    parts = [p for p in label_overrides(label) if not p.startswith("multilevel.control=")]
    return ",".join(parts) or "default"


def match_control(conf: Configuration, controls: list[Configuration], label: str | None) -> tuple[Configuration | None, str]:
    if label is not None:
        hits = [c for c in controls if c.label == label]
        return (hits[0], "--control") if hits else (None, "")
    exact = [c for c in controls if _strip_control(c.label) == conf.label]
    if len(exact) == 1:
        return exact[0], "same label + multilevel.control=schedule"
    if len(controls) == 1:
        return controls[0], "the only schedule control"
    return None, ""


def exclude_mismatched(runs: list[Run], reference: Run) -> None:
    """Mark every run whose data, tokenizer, held-out set or FLOP convention differs from the
    reference's as excluded (status "mismatch"), with the difference as the reason."""
    for r in runs:
        if r.usable and r is not reference:
            why = mismatch(r, reference)
            if why is not None:
                r.status, r.reason = "mismatch", f"{why}; reference run {reference.source}"


# ---------------------------------------------------------------------------------------------
# Against one reference's final loss (baseline or control)


def _own_target(run: Run, metric: str) -> tuple[float | None, float | None]:
    """(final loss, FLOPs to first reach it) of a reference run's own curve."""
    f, loss = run.curve(metric)
    if loss.size == 0:
        return None, None
    target = float(loss[-1])
    return target, first_reach(f, loss, target)


def compare_to(ref: Configuration, conf: Configuration) -> dict:
    """Per-seed and aggregated FLOPs-to-target and savings of `conf` against `ref`'s final losses."""
    out: dict[str, Any] = {
        "label": conf.label,
        "run_kind": conf.run_kind,
        "reference": {"label": ref.label, "run_kind": ref.run_kind},
        "per_seed": [],
    }
    ref_by_seed = _by_seed(ref.runs)
    own = {m: {id(r): _own_target(r, m) for r in ref.runs} for m in METRICS}
    mean_ref = {}
    for m in METRICS:
        pairs = [v for v in own[m].values() if v[0] is not None and v[1] is not None]
        mean_ref[m] = (_mean(p[0] for p in pairs), _mean(p[1] for p in pairs)) if pairs else (None, None)
    for run in conf.runs:
        ref_run = ref_by_seed.get(run.seed) if run.seed is not None else None
        entry: dict[str, Any] = {"seed": run.seed, "run": run.source, "paired": ref_run is not None}
        for m in METRICS:
            entry[m] = _against_target(run, m, *(own[m][id(ref_run)] if ref_run is not None else mean_ref[m]))
        out["per_seed"].append(entry)
    for m in METRICS:
        out[m] = _aggregate([{"paired": e["paired"], **e[m]} for e in out["per_seed"]])
    return out


def _against_target(run: Run, m: str, target: Optional[float], f_ref: Optional[float]) -> dict:
    """One run's FLOPs to reach `target` on metric `m`, and its saving against `f_ref`, the reference's."""
    f, loss = run.curve(m)
    flops = first_reach(f, loss, target) if target is not None else None
    blocks = run.curve(m, blocks=True)
    flops_b = first_reach(blocks[0], blocks[1], target) if (blocks is not None and target is not None) else None
    final = run.final(m)
    e = {
        "target": target,
        "reference_flops": f_ref,
        "flops": flops,
        "reached": flops is not None,
        "saving": 1.0 - flops / f_ref if (flops is not None and f_ref) else None,
        "saving_blocks": 1.0 - flops_b / f_ref if (flops_b is not None and f_ref) else None,
        "final_loss": final,
        "loss_diff": final - target if (final is not None and target is not None) else None,
    }
    if target is None:
        e["note"] = f"reference has no {m} loss"
    elif loss.size == 0:
        e["note"] = f"no {m} loss rows"
    return e


def _aggregate(per: list[dict]) -> dict:
    """Means, spreads and paired intervals over the seeds of one metric's per-run entries."""
    reached = [e for e in per if e["reached"]]
    saving = _paired_interval(per, "saving", "no saving")
    if len(reached) < len(per):
        saving["warnings"].append(
            f"{len(per) - len(reached)} of {len(per)} seed(s) never reached the target and are left out: "
            "the mean overstates the saving"
        )
    return {
        "n_runs": len(per),
        "n_reached": len(reached),
        "mean_flops": _mean(e["flops"] for e in reached),
        "std_flops": _std(e["flops"] for e in reached),
        "mean_saving": _mean(e["saving"] for e in reached),
        "std_saving": _std(e["saving"] for e in reached),
        "saving_interval": saving,
        "saving_blocks_interval": _paired_interval(per, "saving_blocks", "no saving"),
        "loss_diff_interval": _paired_interval(per, "loss_diff", "no difference in final loss"),
    }


# ---------------------------------------------------------------------------------------------
# Against the tuned frontier's points (interpolated)


def compare_to_frontier(frontier: Frontier, conf: Configuration) -> dict:
    """Every run of `conf` read on the frontier of its seed (of the mean, unpaired, for a seed without
    one): the single-level FLOPs F* reaching its final val loss, the saving 1 - F / F*, and the loss gap
    at equal FLOPs; outside the frontier's ends only a bound."""
    out: dict[str, Any] = {"label": conf.label, "run_kind": conf.run_kind, "per_seed": []}
    for run in conf.runs:
        env, paired = frontier.envelope_for(run.seed)
        loss, f, fb = run.final("val"), run.total_flops(), run.total_flops(blocks=True)
        e: dict[str, Any] = {"seed": run.seed, "run": run.source, "paired": paired, "final_val_loss": loss,
                             "flops": f, "flops_blocks": fb, "frontier_flops": None, "outside": None,
                             "saving": None, "saving_blocks": None, "saving_bound": None, "loss_gap": None}
        if env is not None and loss is not None and f:
            reading = frontier_flops(env, loss)
            if reading.flops is not None:
                e["frontier_flops"] = reading.flops
                e["saving"] = 1.0 - f / reading.flops
                e["saving_blocks"] = 1.0 - fb / reading.flops if fb else None
            else:
                # below: F* > the dearest budget, saving > 1 - F/F_max; above: F* < the cheapest one.
                e["outside"] = reading.side
                e["saving_bound"] = [">" if reading.side == "below" else "<", 1.0 - f / reading.bound_flops]
            best = frontier_loss(env, f)
            e["loss_gap"] = loss - best if best is not None else None
        out["per_seed"].append(e)
    saving = _paired_interval(out["per_seed"], "saving", "no saving")
    outside = [e for e in out["per_seed"] if e["outside"]]
    if outside:
        saving["warnings"].append(
            f"{len(outside)} of {len(out['per_seed'])} seed(s) outside the frontier (only a bound) are left out"
        )
    out["saving"] = saving
    out["saving_blocks"] = _paired_interval(out["per_seed"], "saving_blocks", "no saving")
    out["loss_gap"] = _paired_interval(out["per_seed"], "loss_gap", "no difference at equal FLOPs")
    out["n_outside"] = {"below": sum(e["outside"] == "below" for e in outside),
                        "above": sum(e["outside"] == "above" for e in outside)}
    return out


# ---------------------------------------------------------------------------------------------
# Held-out loss at fixed FLOPs (fractions of the baseline's total FLOPs; not train.budget, a fraction of steps)


def fixed_flops(configs: list[Configuration], baseline: Configuration) -> dict:
    ref_f = _mean(r.total_flops() for r in baseline.runs)
    if not ref_f:
        return {"flop_fractions": [], "flops": [], "rows": []}
    grid = [frac * ref_f for frac in FLOP_FRACTIONS]
    base_by_seed = _by_seed(baseline.runs)
    rows = []
    for c in configs:
        cells = []
        for at in grid:
            per = []
            for r in c.runs:
                v = value_at(*r.curve("val"), at)
                partner = base_by_seed.get(r.seed)
                b = value_at(*partner.curve("val"), at) if partner is not None else None
                per.append({"paired": partner is not None, "loss": v,
                            "diff": v - b if (v is not None and b is not None) else None})
            cell = {"mean_loss": _mean(e["loss"] for e in per), "n": sum(e["loss"] is not None for e in per)}
            if c is not baseline:
                cell["diff"] = _paired_interval(per, "diff", "no difference")
            cells.append(cell)
        rows.append({"label": c.label, "run_kind": c.run_kind, "is_baseline": c is baseline, "cells": cells})
    return {"flop_fractions": list(FLOP_FRACTIONS), "flops": grid, "rows": rows}


# ---------------------------------------------------------------------------------------------
# Held-out set, uncounted costs, verdict


def held_out(configs: list[Configuration]) -> dict:
    runs = [r for c in configs for r in c.runs]
    se = [r.summary.get("final_val_loss_se") for r in runs]
    se = [float(x) for x in se if isinstance(x, (int, float))]
    held = [r.summary.get("held_out") for r in runs if isinstance(r.summary.get("held_out"), dict)]
    return {
        "tokens": held[0].get("tokens") if held else None,
        "sequences": held[0].get("sequences") if held else None,
        "se_median": float(np.median(se)) if se else None,
        "se_max": max(se) if se else None,
        "n_runs_with_se": len(se),
    }


def uncounted_costs(configs: list[Configuration]) -> list[dict]:
    """Diagnostics and evaluation FLOPs (not on the x-axis), as a share of the training FLOPs."""
    out = []
    for c in configs:
        share = {}
        for key in ("diag_flops", "eval_flops"):
            vals = [r.summary[key] / r.total_flops() for r in c.runs
                    if isinstance(r.summary.get(key), (int, float)) and r.total_flops()]
            share[key] = _mean(vals)
        if any(v is not None for v in share.values()):
            out.append({"label": c.label, "run_kind": c.run_kind, "diag_share": share["diag_flops"],
                        "eval_share": share["eval_flops"]})
    return out


def verdict_word(iv: dict, what: str = "FLOPs") -> str:
    if iv["n"] == 0:
        return "no seed gives a value"
    if iv["ci_low"] is None:
        return f"too few seeds (n={iv['n']})"
    if iv["ci_low"] > 0:
        return f"saves {what}"
    if iv["ci_high"] < 0:
        return f"costs {what}"
    return "no evidence either way"


def verdicts(report: dict) -> list[dict]:
    """One line per compared configuration: the frontier saving when there is a frontier, else the
    saving against the one baseline (val), with the other figures beside it."""
    frontier = {(e["label"], e["run_kind"]): e for e in report["vs_frontier"]}
    baseline = {(e["label"], e["run_kind"]): e for e in report["vs_baseline"]}
    control = {(e["label"], e["run_kind"]): e for e in report["vs_control"]}
    out = []
    for key in [*frontier, *(k for k in baseline if k not in frontier)]:
        f, b = frontier.get(key), baseline.get(key)
        primary, basis = (f["saving"], "frontier") if f else (b["val"]["saving_interval"], "one baseline")
        word = verdict_word(primary)
        if f and f["n_outside"]["below"] and primary["n"] == 0:
            word = "better than the longest baseline (saving only bounded)"
        elif f and f["n_outside"]["above"] and primary["n"] == 0:
            word = "worse than the shortest baseline (costs FLOPs)"
        c = control.get(key)
        out.append({
            "label": key[0], "run_kind": key[1], "basis": basis, "verdict": word,
            "n_seeds": len((f or b)["per_seed"]),
            "saving": primary,
            "saving_blocks": f["saving_blocks"] if f else b["val"]["saving_blocks_interval"],
            "saving_vs_one_baseline": b["val"]["saving_interval"] if b else None,
            "loss_gap_vs_frontier": f["loss_gap"] if f else None,
            "n_outside": f["n_outside"] if f else None,
            "val_loss_diff_vs_control": c["val"]["loss_diff_interval"] if c else None,
            "control": c["reference"]["label"] if c else None,
        })
    return out


def build_report(configs: list[Configuration], baseline: Optional[Configuration], frontier: Frontier,
                 control_label: str | None = None, without_control: Optional[Frontier] = None) -> dict:
    """The per-configuration sections: against the one baseline, the schedule control and the tuned
    frontier's points (the control's own runs against the frontier `without_control` them), the held-out
    loss at fixed FLOPs, the held-out set, the uncounted costs."""
    in_frontier = {id(c) for c in frontier.configs} if frontier.why is None else set()
    # Every single-level setting is a candidate for the frontier, not a method measured against it.
    others = [c for c in configs if c.run_kind != RunKind.single and c is not baseline]
    vs_baseline = [compare_to(baseline, c) for c in others] if baseline is not None else []
    controls = [c for c in others if c.run_kind == RunKind.schedule_control]
    if control_label is not None and not any(c.label == control_label for c in controls):
        raise CompareError(f"--control {control_label!r}: no schedule_control configuration with that label")
    vs_control = []
    for c in others:
        if c.run_kind != RunKind.multilevel:
            continue
        ctrl, why = match_control(c, controls, control_label)
        if ctrl is not None:
            entry = compare_to(ctrl, c)
            entry["reference"]["matched_by"] = why
            vs_control.append(entry)
    configurations = []
    for c in configs:
        configurations.append({
            "label": c.label,
            "run_kind": c.run_kind,
            "budget": c.budget,
            "seeds": c.seeds,
            "n_seeds": len(c.runs),
            "is_baseline": c is baseline,
            "in_frontier": id(c) in in_frontier,
            "runs": [{
                "seed": r.seed,
                "run": r.source,
                "final_train_loss_smoothed": r.final("train"),
                "final_val_loss": r.final("val"),
                "final_val_loss_se": r.summary.get("final_val_loss_se"),
                "total_flops": r.total_flops(),
                "total_flops_blocks": r.total_flops(blocks=True),
            } for r in c.runs],
        })
    report = {
        "baseline": ({"label": baseline.label, "run_kind": baseline.run_kind, "seeds": baseline.seeds}
                     if baseline is not None else None),
        "configurations": configurations,
        "vs_baseline": vs_baseline,
        "vs_control": vs_control,
        "vs_frontier": [compare_to_frontier(without_control if c.run_kind == RunKind.schedule_control
                                            and without_control is not None and without_control.why is None
                                            else frontier, c) for c in others] if frontier.why is None else [],
        "fixed_flops": fixed_flops(configs, baseline) if baseline is not None else
        {"flop_fractions": [], "flops": [], "rows": []},
        "held_out": held_out(configs),
        "uncounted_costs": uncounted_costs(configs),
    }
    report["verdicts"] = verdicts(report)
    return report
