"""The report's per-configuration numbers, every seed of every configuration (the arms' verdict on
evaluation seeds apart is in `verdict`).

* **vs the one baseline** (the old figure, kept and named as such): FLOPs a run needs to reach the
  single-level baseline's final loss, saving = 1 - F / F_ref, train and val.
* **vs the tuned frontier's points** (held-out loss; see `frontier`): for each run the single-level
  FLOPs F* that reach its final val loss on its seed's envelope (linear in log FLOPs between points;
  "outside the frontier" beyond its ends, then only that run's bound). saving = 1 - F_run / F*. Also under
  the blocks-only FLOP convention, and the loss gap at equal FLOPs: final val loss - the frontier's there.
  The configuration's saving is only a bound where its runs lie beyond the frontier's data with
  confidence, decided as an arm's verdict is (verdict.on_data): runs below its lowest loss that are
  not give no verdict, never a bound.
* **vs the schedule control**: as vs the baseline, against the control's final loss.
* **held-out loss at fixed FLOPs** (fractions of the baseline's total FLOPs), with paired differences.
* **intervals**: per configuration over seeds, paired by seed (see statistics.interval).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Optional

import numpy as np

from mltrain.method.kinds import RunKind
from mltrain.runs.keys import label_overrides
from mltrain.tools.compare.frontier import Frontier
from mltrain.tools.compare.loading import CompareError, Configuration, Run, mismatch
from mltrain.tools.compare.ondata import BEYOND_CONFIDENCE
from mltrain.tools.compare.statistics import first_reach, frontier_flops, frontier_loss, interval, interval_word, value_at
from mltrain.tools.compare.tables import (Baseline, ConfigurationRow, ConfigurationRun, ConfigVerdict, FixedFlops,
                                          FixedFlopsCell, FixedFlopsRow, HeldOut, Outside, Reference, SeedInterval,
                                          SeedVsFrontier, SeedVsReference, TargetReading, TargetSummary, UncountedCost,
                                          VsFrontier, VsReference)
from mltrain.tools.compare.verdict import on_data

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


def _paired_interval(entries: Iterable[tuple[bool, Optional[float]]], zero_means: str) -> SeedInterval:
    """Interval of the values of (paired, value) entries over the paired ones that have a value; when
    none is paired, over all of them, with a warning that they are not paired."""
    entries = [(p, v) for p, v in entries if v is not None]
    paired = [v for p, v in entries if p]
    if paired:
        out = interval(paired, zero_means)
        unpaired = sum(1 for p, _ in entries if not p)
        return out.warned(f"{unpaired} seed(s) without a partner of the same seed left out") if unpaired else out
    out = interval([v for _, v in entries], zero_means)
    return out.warned("no seed has a partner of the same seed: not a paired comparison") if out.n else out


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


def compare_to(ref: Configuration, conf: Configuration, name: str = "", matched_by: Optional[str] = None) -> VsReference:
    """Per-seed and aggregated FLOPs-to-target and savings of `conf` against `ref`'s final losses."""
    ref_by_seed = _by_seed(ref.runs)
    own = {m: {id(r): _own_target(r, m) for r in ref.runs} for m in METRICS}
    mean_ref = {}
    for m in METRICS:
        pairs = [v for v in own[m].values() if v[0] is not None and v[1] is not None]
        mean_ref[m] = (_mean(p[0] for p in pairs), _mean(p[1] for p in pairs)) if pairs else (None, None)
    per_seed = []
    for run in conf.runs:
        ref_run = ref_by_seed.get(run.seed) if run.seed is not None else None
        readings = [_against_target(run, m, *(own[m][id(ref_run)] if ref_run is not None else mean_ref[m]))
                    for m in METRICS]
        per_seed.append(SeedVsReference(run.seed, run.source, ref_run is not None, *readings))
    return VsReference(conf.label, conf.run_kind, Reference(ref.label, ref.run_kind, matched_by), tuple(per_seed),
                       _aggregate([(e.paired, e.train) for e in per_seed]),
                       _aggregate([(e.paired, e.val) for e in per_seed]), name)


def _against_target(run: Run, m: str, target: Optional[float], f_ref: Optional[float]) -> TargetReading:
    """One run's FLOPs to reach `target` on metric `m`, and its saving against `f_ref`, the reference's."""
    f, loss = run.curve(m)
    flops = first_reach(f, loss, target) if target is not None else None
    blocks = run.blocks_curve(m)
    flops_b = first_reach(blocks[0], blocks[1], target) if (blocks is not None and target is not None) else None
    final = run.final(m)
    note = f"reference has no {m} loss" if target is None else f"no {m} loss rows" if loss.size == 0 else None
    return TargetReading(target, f_ref, flops, flops is not None,
                         1.0 - flops / f_ref if (flops is not None and f_ref) else None,
                         1.0 - flops_b / f_ref if (flops_b is not None and f_ref) else None,
                         final, final - target if (final is not None and target is not None) else None, note)


def _aggregate(per: list[tuple[bool, TargetReading]]) -> TargetSummary:
    """Means, spreads and paired intervals over the seeds of one metric's (paired, reading) per run."""
    reached = [t for _, t in per if t.reached]
    saving = _paired_interval(((p, t.saving) for p, t in per), "no saving")
    if len(reached) < len(per):
        saving = saving.warned(f"{len(per) - len(reached)} of {len(per)} seed(s) never reached the target and are "
                               "left out: the mean overstates the saving")
    return TargetSummary(len(per), len(reached), _mean(t.flops for t in reached), _std(t.flops for t in reached),
                         _mean(t.saving for t in reached), _std(t.saving for t in reached), saving,
                         _paired_interval(((p, t.saving_blocks) for p, t in per), "no saving"),
                         _paired_interval(((p, t.loss_diff) for p, t in per), "no difference in final loss"))


# ---------------------------------------------------------------------------------------------
# Against the tuned frontier's points (interpolated)


BEYOND = f"beyond the frontier's data with {BEYOND_CONFIDENCE:.1%} confidence"


def compare_to_frontier(frontier: Frontier, conf: Configuration, name: str = "") -> VsFrontier:
    """Every run of `conf` read on the frontier of its seed (of the mean, unpaired, for a seed without
    one): the single-level FLOPs F* reaching its final val loss, the saving 1 - F / F*, and the loss gap
    at equal FLOPs; outside the frontier's ends only that run's bound, and the configuration's bound
    (M's lower confidence limit) only where its runs lie beyond the frontier's data with confidence, by
    the arms' own rule (verdict.on_data): runs below its lowest point decide nothing by themselves."""
    data, _ = on_data(frontier, conf.runs)
    per_seed = [_on_frontier(frontier, run) for run in conf.runs]
    saving = _paired_interval(((e.paired, e.saving) for e in per_seed), "no saving")
    outside = [e for e in per_seed if e.outside]
    if outside:
        saving = saving.warned(f"{len(outside)} of {len(per_seed)} seed(s) outside the frontier (only a bound) are left out")
    return VsFrontier(conf.label, conf.run_kind, tuple(per_seed), saving,
                      _paired_interval(((e.paired, e.saving_blocks) for e in per_seed), "no saving"),
                      _paired_interval(((e.paired, e.loss_gap) for e in per_seed), "no difference at equal FLOPs"),
                      Outside(sum(e.outside == "below" for e in outside), sum(e.outside == "above" for e in outside)),
                      name, data.M_lo if data.kind == "bound" else None, data.gap_upper)


def _on_frontier(frontier: Frontier, run: Run) -> SeedVsFrontier:
    """One run read on its seed's envelope (see compare_to_frontier)."""
    env, paired = frontier.envelope_for(run.seed)
    loss, f, fb = run.final("val"), run.total_flops(), run.total_flops(blocks=True)
    entry = SeedVsFrontier(run.seed, run.source, paired, loss, f, fb)
    if env is None or loss is None or not f:
        return entry
    reading = frontier_flops(env, loss)
    best = frontier_loss(env, f)
    gap = loss - best if best is not None else None
    if reading.flops is not None:
        return replace(entry, frontier_flops=reading.flops, saving=1.0 - f / reading.flops,
                       saving_blocks=1.0 - fb / reading.flops if fb else None, loss_gap=gap)
    # below: F* > the dearest budget, saving > 1 - F/F_max; above: F* < the cheapest one.
    if reading.bound_flops is None:  # frontier_flops names the end a loss outside lies beyond
        raise ValueError(f"{run.source}: outside the frontier without the end it lies beyond")
    return replace(entry, outside=reading.side, loss_gap=gap,
                   saving_bound=(">" if reading.side == "below" else "<", 1.0 - f / reading.bound_flops))


# ---------------------------------------------------------------------------------------------
# Held-out loss at fixed FLOPs (fractions of the baseline's total FLOPs; not train.budget, a fraction of steps)


def fixed_flops(configs: list[Configuration], baseline: Configuration, names: dict) -> FixedFlops:
    ref_f = _mean(r.total_flops() for r in baseline.runs)
    if not ref_f:
        return FixedFlops()
    grid = [frac * ref_f for frac in FLOP_FRACTIONS]
    base_by_seed = _by_seed(baseline.runs)
    rows = [FixedFlopsRow(c.label, c.run_kind, c is baseline,
                          tuple(_at_flops(c, at, base_by_seed, c is baseline) for at in grid), names[c.key])
            for c in configs]
    return FixedFlops(FLOP_FRACTIONS, tuple(grid), tuple(rows))


def _at_flops(c: Configuration, at: float, base_by_seed: dict[Any, Run], is_baseline: bool) -> FixedFlopsCell:
    """A configuration's val loss at `at` FLOPs, and its paired difference from the baseline's there."""
    per = []  # (paired, loss, difference from the baseline's) per run
    for r in c.runs:
        v = value_at(*r.curve("val"), at)
        partner = base_by_seed.get(r.seed)
        b = value_at(*partner.curve("val"), at) if partner is not None else None
        per.append((partner is not None, v, v - b if (v is not None and b is not None) else None))
    diff = None if is_baseline else _paired_interval(((p, d) for p, _, d in per), "no difference")
    return FixedFlopsCell(_mean(v for _, v, _ in per), sum(v is not None for _, v, _ in per), diff)


# ---------------------------------------------------------------------------------------------
# Held-out set, uncounted costs, verdict


def held_out(configs: list[Configuration]) -> HeldOut:
    runs = [r for c in configs for r in c.runs]
    logged_se = [r.summary.get("final_val_loss_se") for r in runs]
    se = [float(x) for x in logged_se if isinstance(x, (int, float))]
    held = [h for r in runs if isinstance(h := r.summary.get("held_out"), dict)]
    return HeldOut(held[0].get("tokens") if held else None, held[0].get("sequences") if held else None,
                   float(np.median(se)) if se else None, max(se) if se else None, len(se))


def uncounted_costs(configs: list[Configuration], names: dict) -> list[UncountedCost]:
    """Diagnostics and evaluation FLOPs (not on the x-axis), as a share of the training FLOPs."""
    out = []
    for c in configs:
        diag, evaluation = (_mean([r.summary[key] / r.total_flops() for r in c.runs
                                   if isinstance(r.summary.get(key), (int, float)) and r.total_flops()])
                            for key in ("diag_flops", "eval_flops"))
        if diag is not None or evaluation is not None:
            out.append(UncountedCost(c.label, c.run_kind, diag, evaluation, names[c.key]))
    return out


def verdict_word(iv: SeedInterval) -> str:
    return interval_word(iv.n, iv.ci_low, iv.ci_high) if iv.n else "no seed gives a value"


def verdicts(vs_frontier: list[VsFrontier], vs_baseline: list[VsReference], vs_control: list[VsReference]
             ) -> list[ConfigVerdict]:
    """One line per compared configuration: the frontier saving when there is a frontier, else the
    saving against the one baseline (val), with the other figures beside it."""
    frontier = {(e.label, e.run_kind): e for e in vs_frontier}
    baseline = {(e.label, e.run_kind): e for e in vs_baseline}
    control = {(e.label, e.run_kind): e for e in vs_control}
    out = []
    for key in [*frontier, *(k for k in baseline if k not in frontier)]:
        f, b, c = frontier.get(key), baseline.get(key), control.get(key)
        ref: VsFrontier | VsReference
        if f is not None:
            ref, primary, basis, blocks = f, f.saving, "frontier", f.saving_blocks
            word = _frontier_word(f, primary)
        elif b is not None:
            ref, primary, basis, blocks = b, b.val.saving_interval, "one baseline", b.val.saving_blocks_interval
            word = verdict_word(primary)
        else:  # never: each key is a frontier's or a baseline's
            continue
        out.append(ConfigVerdict(
            key[0], key[1], basis, word, len(ref.per_seed), primary,
            blocks, b.val.saving_interval if b else None,
            f.loss_gap if f else None, f.n_outside if f else None, c.val.loss_diff_interval if c else None,
            c.reference.label if c else None, ref.name,
            1 - 1 / f.bound if f and f.bound is not None else None))
    return out


def _frontier_word(f: VsFrontier, primary: SeedInterval) -> str:
    """The verdict against the frontier's points, by the arms' rule: where the runs lie beyond its data
    with confidence, from the bound (its lower confidence limit above 1: a saving); runs below the
    frontier's lowest loss that are not give no verdict (no bound claimed); else from the interval over
    the runs inside."""
    if f.bound is not None:
        return "saves FLOPs (saving only bounded)" if f.bound > 1 else "no evidence either way"
    if f.n_outside.below and primary.n == 0:
        return f"{f.n_outside.below} run(s) below the frontier's lowest loss, not {BEYOND}: no verdict"
    if f.n_outside.above and primary.n == 0:
        return "worse than the shortest baseline (costs FLOPs)"
    return verdict_word(primary)


def _configuration(c: Configuration, baseline: Optional[Configuration], in_frontier: set, name: str) -> ConfigurationRow:
    runs = tuple(ConfigurationRun(r.seed, r.source, r.final("train"), r.final("val"), r.summary.get("final_val_loss_se"),
                                  r.total_flops(), r.total_flops(blocks=True)) for r in c.runs)
    return ConfigurationRow(c.label, c.run_kind, c.budget, tuple(c.seeds), len(c.runs), c is baseline,
                            id(c) in in_frontier, runs, name)


def _vs_control(others: list[Configuration], control_label: Optional[str], names: dict) -> list[VsReference]:
    """Each multilevel configuration against its schedule control's final losses."""
    controls = [c for c in others if c.run_kind == RunKind.schedule_control]
    if control_label is not None and not any(c.label == control_label for c in controls):
        raise CompareError(f"--control {control_label!r}: no schedule_control configuration with that label")
    out = []
    for c in others:
        if c.run_kind != RunKind.multilevel:
            continue
        ctrl, why = match_control(c, controls, control_label)
        if ctrl is not None:
            out.append(compare_to(ctrl, c, names[c.key], matched_by=why))
    return out


def build_report(configs: list[Configuration], baseline: Optional[Configuration], frontier: Frontier, names: dict,
                 control_label: str | None = None, without_control: Optional[Frontier] = None) -> dict[str, Any]:
    """The per-configuration sections (Report's fields of those names, each configuration with its name from
    `names`, (run kind, label) -> name): against the one baseline, the schedule control and the tuned
    frontier's points (the control's own runs against the frontier `without_control` them), the held-out
    loss at fixed FLOPs, the held-out set, the uncounted costs, and one verdict line per configuration."""
    in_frontier = {id(c) for c in frontier.configs} if frontier.why is None else set()
    # Every single-level setting is a candidate for the frontier, not a method measured against it.
    others = [c for c in configs if c.run_kind != RunKind.single and c is not baseline]
    vs_baseline = [compare_to(baseline, c, names[c.key]) for c in others] if baseline is not None else []
    vs_control = _vs_control(others, control_label, names)
    plain = without_control if without_control is not None and without_control.why is None else frontier
    vs_frontier = [compare_to_frontier(plain if c.run_kind == RunKind.schedule_control else frontier, c, names[c.key])
                   for c in others] if frontier.why is None else []
    return {
        "baseline": Baseline(baseline.label, baseline.run_kind, tuple(baseline.seeds)) if baseline is not None else None,
        "configurations": tuple(_configuration(c, baseline, in_frontier, names[c.key]) for c in configs),
        "vs_baseline": tuple(vs_baseline),
        "vs_control": tuple(vs_control),
        "vs_frontier": tuple(vs_frontier),
        "fixed_flops": fixed_flops(configs, baseline, names) if baseline is not None else FixedFlops(),
        "held_out": held_out(configs),
        "uncounted_costs": tuple(uncounted_costs(configs, names)),
        "verdicts": tuple(verdicts(vs_frontier, vs_baseline, vs_control)),
    }
