"""The comparison as one call: run dirs in, the report out (and comparison.{json,md,png} when asked):
as typed results (`compare_report`, mltrain/tools/compare/results.py) or as the dict comparison.json
holds (`compare_dirs`).

    from mltrain.tools.compare import compare_report
    report = compare_report(["multirun/tune"], select_seeds=[0])
    best = {a.label: a.selected for a in report.arms}

Bad input that stops everything (no such path, no run dirs, an unreadable summary) raises CompareError;
everything else (a selection seed no run has, a --tune key no run varies, no single-level runs, a fit that
does not converge) is a line in the report's `warnings` and the rest of the report is still made.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Sequence

from mltrain.method.kinds import RunKind
from mltrain.core import guarded
from mltrain.runs.files import json_default
from mltrain.tools.compare import frontier as frontiers
from mltrain.tools.compare.analysis import build_report, choose_baseline, exclude_mismatched
from mltrain.tools.compare.arms import (TUNED_KEYS, Arm, group_arms, label_parts, select, setting_of,
                                        tuning_warnings, typed)
from mltrain.tools.compare.cells import markdown_safe
from mltrain.tools.compare.loading import (METRICS, RUN_RECORD, SUMMARY, CompareError, Configuration, Run,
                                           comparability, data_groups, describe_group, differing_fields,
                                           drop_duplicates, find_run_dirs, group_runs, load_run_dir,
                                           unreadable_metrics, vet)
from mltrain.tools.compare.names import readable
from mltrain.tools.compare.powerlaw import Fit, fit_power_law
from mltrain.tools.compare.results import Arm as ArmResult
from mltrain.tools.compare.results import (ConfigurationMean, EnvelopePoint, FitError, Frontier, FrontierRun, Report,
                                          SeedEnvelope, WallclockFrontier, WithoutControl)
from mltrain.tools.compare.tables import BootstrapRecord, LeftOut, Outputs
from mltrain.tools.compare.statistics import INTERVAL_METHOD, moving_average
from mltrain.tools.compare import dimensions
from mltrain.tools.compare.verdict import (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, FRONTIER_VERDICT, Draws, bootstrap,
                                           fit_error, headline, interpolated_saving, loss_interval, multiplier,
                                           on_data, verdict_word, wallclock_saving)

log = logging.getLogger("mltrain.tools.compare")


def load_dirs(paths: Sequence[str | Path]) -> list[Run]:
    dirs = find_run_dirs(paths)
    if not dirs:
        raise CompareError(f"no run directories (folders with {METRICS}, {SUMMARY} or {RUN_RECORD}) found under: "
                           f"{', '.join(map(str, paths))}")
    return [unreadable_metrics(d) or load_run_dir(d) for d in dirs]


def compare_dirs(paths: list, out: Path | None = None, select_seeds: list | None = None, tune: Sequence[str] = (),
                 plot: bool = True) -> dict:
    """The report of the runs under `paths` (see the package docstring) as comparison.json's dict, written
    to `out` when given."""
    return compare_report(paths, out, select_seeds, tune, plot).to_json()


def compare_report(paths: list, out: Path | None = None, select_seeds: list | None = None, tune: Sequence[str] = (),
                   plot: bool = True) -> Report:
    """The report of the runs under `paths` as typed results (compare_dirs: the same as comparison.json's dict)."""
    command = ["mltrain-compare", *map(str, paths)] + (["--out", str(out)] if out else [])
    command += (["--select-seeds", *map(str, select_seeds)] if select_seeds else [])
    command += [a for k in tune for a in ("--tune", k)]
    return compare_runs(load_dirs(paths), Path(out) if out else None, select_seeds=select_seeds, tune=tune,
                        plot=plot, command=" ".join(shlex.quote(a) for a in command))


def _reference(runs: list[Run], baseline_label: Optional[str], data_group: Optional[str] = None
               ) -> tuple[Optional[Run], Optional[str]]:
    """The run the others must match in data, tokenizer, held-out set, FLOP convention and model, and
    the line that names the fields that differ and the runs left out for them: the reference comes from
    the group `data_group` names (its data description, tokenizer, held-out fingerprint or parameter
    count), else from the largest group (a tie: the one holding the baseline), never silently."""
    groups = data_groups(runs)
    if data_group is not None:
        chosen = [g for g in groups if data_group in {str(v) for v in comparability(g[0]).values()}]
        if not chosen:
            fields = differing_fields(groups) if len(groups) > 1 else None
            raise CompareError(f"--data-group {data_group!r}: no usable run was trained on it (the groups: "
                               + "; ".join(describe_group(g, fields) for g in groups) + ")")
        groups = [chosen[0]] + [g for g in groups if g is not chosen[0]]  # the largest that matches
    elif len(groups) > 1 and len(groups[0]) == len(groups[1]):
        tied = [g for g in groups if len(g) == len(groups[0])]  # of these, the one holding the baseline's run
        preferred = next((g for g in tied if _preferred_run(g, baseline_label, fallback=False) is not None), tied[0])
        groups = [preferred] + [g for g in groups if g is not preferred]
    reference = _preferred_run(groups[0], baseline_label) if groups else None
    if len(groups) < 2:
        return reference, None
    fields = differing_fields(groups)  # what differs, named: the data, the held-out set, the model's size, ...
    line = (f"runs differ in {', '.join(fields)}: compared {describe_group(groups[0], fields)}; left out "
            + "; ".join(describe_group(g, fields) + f" ({', '.join(r.source for r in g)})" for g in groups[1:])
            + (" (chosen with --data-group)" if data_group is not None else " (the largest group; choose another with "
               "--data-group)"))
    return reference, line


def _preferred_run(runs: list[Run], baseline_label: Optional[str], fallback: bool = True) -> Optional[Run]:
    usable = [r for c in group_runs(r for r in runs if r.usable) for r in c.runs]
    for wanted in ((lambda r: r.label == baseline_label) if baseline_label else None,
                   lambda r: r.run_kind == RunKind.single, (lambda r: True) if fallback else None):
        hit = next((r for r in usable if wanted and wanted(r)), None)
        if hit is not None:
            return hit
    return None


def compare_runs(runs: list[Run], out: Optional[Path], *, select_seeds: Optional[list] = None,
                 tune: Sequence[str] = (), plot: bool = True, smooth: int = 10, baseline_label: Optional[str] = None,
                 control_label: Optional[str] = None, logx: bool = False, dpi: int = 120, command: str = "",
                 data_group: Optional[str] = None) -> Report:
    for r in runs:
        r.smoothed = moving_average(r.train.loss, smooth)
        vet(r)
    said = drop_duplicates(runs)
    reference, other_data = _reference(runs, baseline_label, data_group)
    if other_data is not None:
        said.append(other_data)
    if reference is not None:
        exclude_mismatched(runs, reference)
    configs = group_runs(r for r in runs if r.usable)
    if not configs:
        raise CompareError("no usable run: " + "; ".join(f"{r.source}: {r.status} ({r.reason})" for r in runs[:3])
                           + ("; ..." if len(runs) > 3 else ""))
    select_seeds = [typed(s) for s in select_seeds] if select_seeds else None
    tuned = tuple(dict.fromkeys([*TUNED_KEYS, *tune]))
    arms = group_arms(configs, tuned)
    for a in arms:
        select(a, select_seeds)
    _name_arms(arms)
    warnings = [line for line in said if line]  # what was left out of the set given, first
    warnings += tuning_warnings(arms, configs, [k for k in tune if k not in TUNED_KEYS])
    warnings += _seed_warnings(configs, select_seeds)
    full = Against(*frontiers.build(configs, arms, select_seeds))
    # The control is single-level training: a frontier candidate, and an arm measured against the frontier
    # built without its runs; every other arm is measured against the frontier with them.
    controls = [a for a in arms if a.run_kind == dimensions.CONTROL]
    plain = Against(*frontiers.build(configs, arms, select_seeds, kinds=(RunKind.single,))) if controls else full
    against = {id(a): plain if a.run_kind == dimensions.CONTROL else full for a in arms}
    others = [a for a in arms if a.run_kind != dimensions.CONTROL]
    draws, fitted = bootstrap(full.frontier, full.fit, others) if full.fit.available else ({}, 0)
    if controls and plain.fit.available:
        draws.update(bootstrap(plain.frontier, plain.fit, controls)[0])
    kept = [a.selected for a in arms if a.run_kind == RunKind.single and a.selected is not None]
    baseline = choose_baseline(configs, baseline_label, kept)
    config_names, common = _name_configs(configs, tuned)
    tables = build_report(configs, baseline, full.frontier, config_names, control_label, plain.frontier)
    warnings += _report_warnings(runs, baseline, full.frontier, full.fit, arms)
    arm_results = tuple(_arm_result(a, against[id(a)], draws.get(id(a), Draws()), fitted) for a in arms)
    frontier = replace(_frontier(full, config_names, tuned, select_seeds, arms),
                       tried_per_budget=tuple(dimensions.tried_per_budget(full.frontier, configs, arms, tuned,
                                                                          config_names, select_seeds)),
                       gains=tuple(dimensions.gains(full.frontier, configs, arms, tuned, select_seeds,
                                                    [a for a in arms if a.run_kind != RunKind.single])),
                       without_control=(WithoutControl(plain.fit.as_result(), plain.error, len(plain.frontier.points))
                                        if controls else None))
    report = Report(
        command=command, smooth=smooth, smoothing=f"trailing moving average over the last {smooth} level-0 train rows",
        pairing="by seed; a seed the reference lacks uses the reference's mean (and is left out of intervals)",
        interval_method=INTERVAL_METHOD, std="sample std (ddof=1) over seeds that reached the target; null with fewer than 2",
        tuned_keys=tuned, select_seeds=select_seeds, optimistic=not select_seeds or any(a.optimistic for a in arms),
        bootstrap=BootstrapRecord(BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, fitted,
                                  "evaluation seeds drawn with replacement, the frontier refitted on each draw; "
                                  "the interval t-calibrated: log M ± t(n − 1) · sd of the draws' log M · √(n/(n − 1))"),
        warnings=tuple(warnings),
        arms=arm_results,
        frontier=frontier,
        excluded=tuple(LeftOut(r.source, r.label, r.run_kind, r.seed, r.status, r.reason) for r in runs if not r.usable),
        common_settings=common, **tables,
        outputs=Outputs(*(str(out / f"comparison.{k}") if out and (k != "png" or plot) else None
                          for k in ("png", "md", "json"))),
    )
    if out is not None:
        _write(report, out, configs, baseline, plot, logx, dpi)
    return report


def _write(report: Report, out: Path, configs: list[Configuration], baseline, plot: bool, logx: bool, dpi: int) -> None:
    from mltrain.tools.compare.plot import plot as draw
    from mltrain.tools.compare.report import render_markdown

    # never through a link: checked for all three before any is written (mltrain/core/guarded.py)
    guarded.refuse_linked([out / f"comparison.{ext}" for ext in ("png", "md", "json")], out)
    guarded.write_json(out / "comparison.json", report.to_json(), root=out, indent=2, default=json_default)
    guarded.write_text(out / "comparison.md", render_markdown(markdown_safe(report)), root=out)
    if plot:
        draw(configs, baseline, report, out / "comparison.png", logx, dpi=dpi)


def _seed_warnings(configs: list[Configuration], select_seeds: Optional[list]) -> list[str]:
    seeds = {r.seed for c in configs for r in c.runs}
    out = [f"--select-seeds {s}: no usable run has seed {s}" for s in select_seeds or [] if s not in seeds]
    if not select_seeds:
        out.append("no selection seeds (--select-seeds): each arm's setting was chosen on the seeds that measure "
                   "it, so the verdict is optimistic")
    return out


def _report_warnings(runs, baseline, frontier, fit: Fit, arms: list[Arm]) -> list[str]:
    out = []
    if baseline is None:
        left = [r for r in runs if not r.usable and r.run_kind in (RunKind.single, "?")]
        why = "; ".join(f"{r.source}: {r.status} ({r.reason})" for r in left[:3])
        out.append("no baseline: no usable single-level run" + (f" [left out: {why}]" if why else ""))
    if frontier.why is not None:
        out.append(f"no frontier: {frontier.why}")
    if not fit.available:
        out.append(f"multiplier unavailable: {fit.why}")
    out += [f"{a.name}: {a.note}" for a in arms if a.note]
    return out


def _name_arms(arms: list[Arm]) -> None:
    names, _ = readable([(a.run_kind, label_parts(a.label)) for a in arms])
    for a, name in zip(arms, names):
        a.name = name


def _name_configs(configs: list[Configuration], tuned: Sequence[str]) -> tuple[dict[tuple, str], dict[str, str]]:
    """(each configuration's readable name, (run kind, label) -> name; the settings every one has, key -> value)."""
    items = []
    for c in configs:
        parts = {**setting_of(c.runs[0], tuned), **label_parts(c.label)}
        items.append((c.run_kind, parts))
    names, common = readable(items)
    return {c.key: n for c, n in zip(configs, names)}, {k: str(v) for k, v in common.items()}


@dataclass
class Against:
    """A frontier arms are read against (FLOPs and wall-clock), the power law fitted to it and its own error."""

    frontier: frontiers.Frontier
    clock: frontiers.Frontier
    fit: Fit = field(init=False)
    error: FitError = field(init=False)

    def __post_init__(self) -> None:
        pts = self.frontier.points
        self.fit = (Fit(None, self.frontier.why, 0, None) if self.frontier.why is not None and not pts
                    else fit_power_law([p.flops for p in pts], [p.loss for p in pts]))
        self.error = fit_error(self.fit, self.frontier)


def _arm_result(arm: Arm, against: Against, draws: Draws, fitted: int) -> ArmResult:
    runs, frontier, error, control = arm.eval_runs, against.frontier, against.error, arm.run_kind == dimensions.CONTROL
    m, per_run = multiplier(against.fit, runs, draws, fitted, frontier.points)
    if not runs and arm.selected is not None:
        m = replace(m, why="no run of the kept setting on a seed apart from the selection seeds: nothing left to measure on")
    interpolated = interpolated_saving(frontier, runs, lambda r: r.total_flops())
    is_frontier = arm.run_kind == RunKind.single  # its settings are the frontier: read on its own fit, M is the fit's error
    m = headline(m, *on_data(frontier, runs), error)
    within = None if is_frontier else error.holds(m)
    return ArmResult(
        name=arm.name, label=arm.label, run_kind=arm.run_kind, settings_tried=arm.settings_tried,
        selection_seeds=tuple(arm.selection_seeds), eval_seeds=tuple(sorted({r.seed for r in runs}, key=str)),
        optimistic=arm.optimistic, selected=arm.setting(arm.selected) if arm.selected is not None else {},
        selected_label=arm.selected.label if arm.selected is not None else None, final_val_loss=loss_interval(runs),
        multiplier=m, saving_interpolated=interpolated, saving_wallclock=wallclock_saving(against.clock, runs),
        is_frontier=is_frontier,
        measured_against=("the frontier without the schedule control's runs" if control
                          else "the frontier with every single-level run"),
        within_fit_error=within, verdict=FRONTIER_VERDICT if is_frontier else verdict_word(m, interpolated, within),
        runs=tuple(per_run),
        selected_by_budget=({str(float(b)): arm.setting(c) for b, c in arm.selected_by_budget.items()}
                            if arm.run_kind == RunKind.single else None))


def _built_from(select_seeds, arms: list[Arm]) -> str:
    """What the frontier's settings were chosen on, as it happened (not as it was asked)."""
    if not select_seeds:
        return "every usable single-level run"
    singles = [a for a in arms if a.run_kind == RunKind.single]
    honest = sorted({s for a in singles if not a.optimistic for s in a.selection_seeds}, key=str)
    if not honest:
        return (f"the single-level settings kept per budget on the seeds that also measure them: no single-level "
                f"run has a selection seed ({', '.join(map(str, select_seeds))}), so the frontier is optimistic")
    return f"the single-level settings kept per budget on seeds {honest}"


def _frontier(against: Against, names: dict, tuned: Sequence[str], select_seeds, arms: list[Arm]) -> Frontier:
    frontier, clock = against.frontier, against.clock
    of: dict[Optional[str], tuple[Run, Configuration]] = {r.source: (r, c) for c in frontier.configs for r in c.runs}

    def env(points) -> tuple[EnvelopePoint, ...]:
        return tuple(EnvelopePoint(p.flops, p.loss, p.budget) for p in points)

    points = []
    for p in frontier.points:
        r, c = of[p.source]
        points.append(FrontierRun(r.seed, p.flops, p.loss, r.run_kind, {**setting_of(r, tuned), "train.budget": r.budget},
                                  names[c.key], r.source))
    on_mean = {(p.flops, p.loss) for p in frontier.mean}
    return Frontier(
        available=frontier.why is None, why=frontier.why, built_from=_built_from(select_seeds, arms),
        seeds=tuple(frontier.seeds), points=tuple(points), fit=against.fit.as_result(), fit_error=against.error,
        budgets=tuple(sorted({c.budget for c in frontier.configs})),
        configurations=tuple(_mean_of(c, frontier.seeds, names) for c in frontier.configs),
        mean_envelope=env(frontier.mean) if len(frontier.mean) >= 2 else None,
        per_seed_envelope=tuple(SeedEnvelope(s, env(p)) for s, p in frontier.per_seed.items()),
        dominated_budgets=tuple(p.budget for p in frontier.means if (p.flops, p.loss) not in on_mean),
        wallclock=WallclockFrontier(clock.why is None, clock.why, clock.basis[1] if clock.basis else None),
    )


def _mean_of(c: Configuration, seeds: list, names: dict) -> ConfigurationMean:
    runs = [r for r in c.runs if r.seed in seeds and r.total_flops() and r.final("val") is not None]
    mean = (lambda xs: sum(xs) / len(xs) if xs else None)  # noqa: E731
    return ConfigurationMean(c.label, names[c.key], c.budget, tuple(r.seed for r in runs),
                             mean([r.total_flops() for r in runs]), mean([r.final("val") for r in runs]))
