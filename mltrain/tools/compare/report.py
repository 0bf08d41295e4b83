"""mltrain-compare's Markdown report, from its typed results (results.py): the `Report`, printed and
written to comparison.md (`render_markdown`). The study's ladder.md has its own renderer
(mltrain/tools/study/ladder_md.py). Every part a report made by mltrain-compare always has (the fit,
the bootstrap record, the held-out set, ...) is taken as present (`_had`)."""

from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence, TypeVar

import numpy as np

from mltrain.tools.compare.powerlaw import FIT_LOSS
from mltrain.tools.compare.results import Arm, GainReading, Multiplier, Report, Saving
from mltrain.tools.compare.statistics import CONFIDENCE, INTERVAL_METHOD, MIN_SEEDS
from mltrain.tools.compare.tables import Baseline, Reference, SeedInterval, TargetReading, VsReference

T = TypeVar("T")
Fmt = Callable[[Optional[float]], str]


def _fmt(spec: str, scale: float = 1, suffix: str = "") -> Fmt:
    """A number as `spec` (times `scale`, then `suffix`), "—" for none."""
    return lambda x: "—" if x is None else f"{(x * scale if scale != 1 else x):{spec}}{suffix}"


FLOPS, PCT, LOSS, DIFF, TIMES = _fmt(".3g"), _fmt(".1f", 100, "%"), _fmt(".4f"), _fmt("+.4f"), _fmt(".3g", 1, "×")


def _had(part: Optional[T]) -> T:
    """A part every report mltrain-compare makes has (optional only in a file an older version wrote)."""
    if part is None:
        raise ValueError("a report part mltrain-compare always writes is missing")
    return part


def _table(*columns: str) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def _section(title: str, prose: str, columns: Sequence[str], rows: Iterable[str], after: Sequence[str] = ()) -> list[str]:
    """`## title`, its prose (if any), a table of `columns` with `rows`, then `after` and a blank line."""
    return [f"## {title}", "", *([prose, ""] if prose else []), *_table(*columns), *rows, *after, ""]


def _pm(values: list, fmt: Fmt) -> str:
    v = [x for x in values if x is not None]
    if not v:
        return "—"
    return fmt(float(np.mean(v))) + (f" ± {fmt(float(np.std(v, ddof=1)))}" if len(v) > 1 else "")


def _ci(iv: Optional[SeedInterval], fmt: Fmt) -> str:
    """`mean [low, high] (n=…)`, with a `!` when the interval has a warning."""
    if not iv or iv.n == 0:
        return "—"
    text = fmt(iv.mean) + (f" [{fmt(iv.ci_low)}, {fmt(iv.ci_high)}]" if iv.ci_low is not None else "")
    return text + f" (n={iv.n})" + (" !" if iv.warnings else "")


def _span(lo: Optional[float], hi: Optional[float], unbounded: bool, fmt: Fmt, top: str = "∞") -> str:
    if lo is None:
        return ""
    return f" [{fmt(lo)}, {top})" if unbounded else (f" [{fmt(lo)}, {fmt(hi)}]" if hi is not None else "")


def _cell(e: TargetReading) -> tuple[str, str]:
    if e.target is None:
        return "no target", "—"
    return (FLOPS(e.flops), PCT(e.saving)) if e.reached else ("not reached", "—")


def _md_table(entries: Sequence[VsReference]) -> list[str]:
    lines = _table("configuration", "seed", "train: FLOPs to target", "train: saving", "val: FLOPs to target",
                   "val: saving", "val: saving, blocks-only FLOPs")
    for e in entries:
        for i, s in enumerate(e.per_seed):
            cells = [f"`{e.name}`" if i == 0 else "", f"{s.seed}" + ("" if s.paired else "*"), *_cell(s.train),
                     *_cell(s.val), PCT(s.val.saving_blocks)]
            lines.append("| " + " | ".join(cells) + " |")
        cells = []
        for a in (e.train, e.val):
            reached = f" ({a.n_reached}/{a.n_runs} reached)"
            cells += [(_pm([a.mean_flops], FLOPS) if a.mean_flops is not None else "—") + reached,
                      _ci(a.saving_interval, PCT)]
        cells.append(_ci(e.val.saving_blocks_interval, PCT))
        lines.append(f"| | **mean [95% CI]** | {' | '.join(cells)} |")
    return lines


def _measures(a: Arm) -> tuple[tuple[str, Multiplier | Saving], ...]:
    """An arm's three readings of its saving, each with the name the report gives it."""
    return (("multiplier", _had(a.multiplier)), ("saving interpolated", _had(a.saving_interpolated)),
            ("saving wallclock", _had(a.saving_wallclock)))


def _warnings(report: Report) -> list[str]:
    out = [f"- {w}" for w in report.warnings]
    for a in report.arms:
        out += [f"- `{a.name}`, {what}: {w}" for what, measure in _measures(a) for w in measure.warnings]
    for v in report.verdicts:
        for what, iv in (("saving", v.saving), ("saving vs the one baseline", v.saving_vs_one_baseline)):
            out += [f"- `{v.name}`, {what}: {w}" for w in (iv.warnings if iv else ())]
    return out


def render_markdown(report: Report) -> str:
    lines = ["# mltrain comparison: loss vs FLOPs", "", f"Command: `{report.command}`", ""]
    loud = [w for w in report.warnings if w.isupper() or w.startswith("THE BASELINE")]
    lines += [f"> **{w}**" for w in loud] + ([""] if loud else [])
    if report.common_settings:
        common = ", ".join(f"{k}={v}" for k, v in report.common_settings.items())
        lines += [f"Every configuration below also has: `{common}`.", ""]
    lines += [
        f"Intervals: {int(CONFIDENCE * 100)}% {INTERVAL_METHOD}, of per-seed values paired by seed "
        f"(`!` = a warning below: fewer than {MIN_SEEDS} seeds, or the interval contains 0); the multiplier's "
        "inside the frontier's data a Student t interval on the runs' log M read on its points, else a "
        "t-calibrated bootstrap over the evaluation seeds.",
        "",
    ]
    for section in (_verdict_section, _excluded_section, _configurations_section, _per_configuration_section,
                    _held_out_section, _frontier_section, _tuning_space_section, _fixed_flops_section,
                    _references_section):
        lines += section(report)
    lines += [""] + _costs_section(report)
    warnings = _warnings(report)
    if warnings:
        lines += ["## Warnings", "", *warnings, ""]
    png = _had(report.outputs).png
    return "\n".join(lines + ([f"Plot: `{png}`", ""] if png else []))


def _references_section(report: Report) -> list[str]:
    """Against the one baseline's final losses, and against each schedule control's."""
    lines = []
    b = report.baseline
    if b is not None:
        lines += [
            f"## vs the one full-length single-level baseline `{_config_name(report, b)}`",
            "",
            f"Train loss: fine-model (level 0) rows, trailing moving average over the last {report.smooth} rows. "
            "Val loss: as logged. Target = the baseline's final loss; FLOPs to target = first FLOPs at which "
            "a run reaches it (linear interpolation between logged rows); saving = 1 − F / F_ref, F_ref = FLOPs "
            "the baseline needed to reach its own final loss. This baseline's LR has decayed only at its end, "
            "so a run reaching its final loss earlier is compared with a schedule that had not finished: "
            "the frontier is the fair reference. `*` = no baseline run with that seed (compared with "
            "the baseline's mean target and mean F_ref, left out of the interval).",
            "",
        ]
        lines += _md_table(report.vs_baseline) if report.vs_baseline else ["(no other configuration)"]
    by_ref: dict[tuple, list[VsReference]] = {}
    for e in report.vs_control:
        by_ref.setdefault((e.reference.label, e.reference.run_kind), []).append(e)
    for entries in by_ref.values():
        lines += ["", f"## vs schedule control `{_config_name(report, entries[0].reference)}`", ""]
        lines += _md_table(entries) + [""] + _table("configuration", "final val loss − control's, same seed")
        lines += [f"| `{e.name}` | {_ci(e.val.loss_diff_interval, DIFF)} |" for e in entries]
    return lines


def _config_name(report: Report, ref: Baseline | Reference) -> str:
    return next((c.name for c in report.configurations if c.label == ref.label and c.run_kind == ref.run_kind),
                f"{ref.label} [{ref.run_kind}]")


def _configurations_section(report: Report) -> list[str]:
    return _section("Configurations", "", ("configuration", "kind", "train.budget", "seeds", "final train loss (smoothed)",
                                           "final val loss", "total FLOPs"), (
        f"| `{c.name}`{' **(baseline)**' if c.is_baseline else (' (frontier)' if c.in_frontier else '')} | {c.run_kind} "
        f"| {c.budget:g} | {c.n_seeds} ({', '.join(map(str, c.seeds))}) "
        f"| {_pm([r.final_train_loss_smoothed for r in c.runs], LOSS)} | {_pm([r.final_val_loss for r in c.runs], LOSS)} "
        f"| {_pm([r.total_flops for r in c.runs], FLOPS)} |" for c in report.configurations))


def _bound_where(m: Multiplier) -> str:
    """Why the arm's M is only a bound: beyond the data with confidence, or the data-only lower limit."""
    data = m.on_data
    if data is not None and data.kind is None:
        return f"data only: {data.n_below} of {data.n} runs below the frontier's lowest loss"
    return "beyond the frontier's data" + (" with confidence" if data is not None else "")


def _multiplier_cell(m: Multiplier) -> str:
    """The headline M (a bound beyond the data; the interpolated M inside it; else the joint fit's, else
    the per-run reading's), with the fitted per-run reading beside it."""
    head, warned = m.led_by(), " !" if m.warnings else ""
    if head.kind == "bound":
        return f"M > {_had(m.bound).value:.3g} (n={head.n or m.n}, {_bound_where(m)})" + warned
    if head.M is None:
        return "—"
    text = TIMES(head.M) + _span(head.M_lo, head.M_hi, head.M_hi_unbounded if m.headline else False, TIMES)
    text += (f" (n={head.n or m.n}"
             + {"interpolated": ", read on the frontier's points", "joint": ", joint fit"}.get(head.kind, "") + ")")
    if head.kind != "per_run" and m.available:
        text += f"; per run {TIMES(m.M)}" + _span(m.M_lo, m.M_hi, m.M_hi_unbounded, TIMES)
    if m.extrapolated:
        text += f", extrapolated {m.beyond_data:.3g}× beyond the frontier's FLOPs"
    return text + (", fitted and interpolated disagree" if m.fit_disagrees else "") + warned


def _saving_of(m: float) -> str:
    return PCT(1 - 1 / m)


def _multiplier_saving_cell(m: Multiplier) -> str:
    head = m.headline
    if head is not None and head.kind == "bound":
        return f"> {_saving_of(_had(_had(m.bound).value))}"
    if head is None or head.M is None:
        return _saving_cell(m)
    return (_saving_of(head.M) + _span(head.M_lo, head.M_hi, head.M_hi_unbounded, lambda v: _saving_of(_had(v)),
                                       "unbounded") + (" !" if m.warnings else ""))


def _saving_cell(s: Multiplier | Saving) -> str:
    if not s.available:
        return "—"
    text = PCT(s.saving) + (f" [{PCT(s.saving_lo)}, {PCT(s.saving_hi)}]" if s.saving_lo is not None else "")
    return text + f" (n={s.n})" + (" !" if s.warnings else "")


def _setting_text(setting: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting.items()) or "(no tuned key set)"


def _verdict_section(report: Report) -> list[str]:
    seeds = report.select_seeds
    lines = ["## Verdict: each arm at its best setting, against the tuned single-level frontier", ""]
    if report.optimistic:
        lines += ["**Optimistic**: " + ("some arm had no run on the selection seeds, so " if seeds else
                  "no selection seeds (`--select-seeds`): ") + "settings were chosen on the seeds that also "
                  "measure them (the winner's curse flatters every arm).", ""]
    else:
        lines += [f"Each arm's setting (and the frontier's, per budget) was chosen on seed(s) {seeds}; every "
                  "number below comes from the other seeds only.", ""]
    lines += _table("arm", "settings tried", "kept setting", "eval seeds", "final val loss", "compute multiplier M",
                    "saving 1 − 1/M", "saving, interpolated", "saving, wall-clock", "verdict")
    why = []
    for a in report.arms:
        m, fl = a.multiplier, _had(a.final_val_loss)
        loss = "—" if fl.mean is None else LOSS(fl.mean) + (f" [{LOSS(fl.lo)}, {LOSS(fl.hi)}]" if fl.lo is not None
                                                            else "")
        cells = (["the frontier", "—", "—", "—"] if a.is_frontier else
                 [_multiplier_cell(_had(m)) + (" ‡" if a.within_fit_error else ""), _multiplier_saving_cell(_had(m)),
                  _saving_cell(_had(a.saving_interpolated)), _saving_cell(_had(a.saving_wallclock))])
        lines.append("| " + " | ".join([f"`{a.name}`", str(a.settings_tried), _setting_text(a.kept),
                                        ", ".join(map(str, a.eval_seeds)) or "—", loss, *cells, a.verdict]) + " |")
        why += [f"- `{a.name}`, {what} unavailable: {measure.why}" for what, measure in
                (() if a.is_frontier else _measures(a)) if not measure.available and measure.why]
    return (lines + [""] + _fit_lines(report) + _degenerate_lines(report) + _fit_error_lines(report) + why
            + ([""] if why else []))


def _degenerate_lines(report: Report) -> list[str]:
    """What comparison.json calls degenerate, said: the fit at a bound, bootstrap draws at one."""
    fit = _had(report.frontier.fit)
    lines = [f"The fit is degenerate: {fit.degenerate} (its curve is that bound's shape, not the data's)."] \
        if fit.available and fit.degenerate else []
    for a in report.arms:
        m = a.multiplier
        if m is not None and m.n_degenerate and m.n_resamples:
            share = m.degenerate_share if m.degenerate_share is not None else m.n_degenerate / max(m.n_resamples, 1)
            lines.append(f"`{a.name}`: {m.n_degenerate} degenerate bootstrap draws ({100 * share:.1f}%: a refit at its "
                         f"bounds, no fit, or the arm beyond the draw's data)"
                         + ("; the interval's upper end is unbounded." if m.M_hi_unbounded else "."))
    return [" ".join(lines), ""] if lines else []


def _fit_error_lines(report: Report) -> list[str]:
    error = report.frontier.fit_error
    if not error.available:
        return [f"The fit's own error: {error.why}.", ""] if error.why and error.why.startswith("unknown") else []
    at = []
    for e in error.per_budget:
        name = next((c.name for c in report.configurations if c.label == e.label and c.run_kind == e.run_kind),
                    e.label)
        at.append(f"budget {float(e.budget):g}" if e.flops is None else
                  f"`{name}` at {FLOPS(e.flops)} FLOPs" if name else f"{FLOPS(e.flops)} FLOPs")
    per = ", ".join(f"{TIMES(e.M)} ({where})" for e, where in zip(error.per_budget, at))
    within = [f"`{a.name}`" for a in report.arms if a.within_fit_error]
    return [
        f"The fit's own error: read on its own fit, the frontier's points give M = {per}, per configuration "
        f"and FLOPs point (a perfect fit: 1 at every point). An arm's M between {TIMES(error.M_lo)} and "
        f"{TIMES(error.M_hi)} is within the fit's error, not a saving or a cost (‡); the single-level arm is the "
        "frontier, not judged against it." + (f" Within it here: {', '.join(within)}." if within else ""),
        "",
    ]


def _fit_lines(report: Report) -> list[str]:
    fit = _had(report.frontier.fit)
    if not fit.available:
        return [f"Fitted compute multiplier unavailable: {fit.why}. M is read on the frontier's points only "
                "(inside its data: interpolated, with a Student t interval; below its lowest loss: a bound).", ""]
    b, (lo, hi), clock = _had(report.bootstrap), _had(fit.flop_range), _had(report.frontier.wallclock)
    return [
        f"Compute multiplier: L(C) = E + A·C^−α fitted to the frontier's {fit.n_points} points "
        f"({FLOPS(lo)} to {FLOPS(hi)} FLOPs): E = {fit.E:.4g}, A = {fit.A:.4g}, α = {fit.alpha:.4g} "
        f"(scipy.optimize.least_squares, {FIT_LOSS}; rms log residual {fit.rms_log_residual:.3g}). "
        "C_eq = the FLOPs at which the fitted frontier reaches a run's final held-out loss; M = C_eq / C_run "
        "(geometric mean over seeds). Interval: bootstrap over the evaluation seeds "
        f"({b.resamples} draws with the frontier refitted on each, numpy seed {b.seed}), t-calibrated: log M ± "
        "t(n − 1) · the draws' sd · √(n/(n − 1)). Which M leads: inside the frontier's data (every run between "
        "its seed's envelope ends), M read on the frontier's points with a Student t interval; below its lowest "
        "loss with 97.5% confidence, a bound M > its lower confidence limit; else the fitted M.",
        "",
        f"Wall-clock: {clock.time_basis or 'unavailable (' + str(clock.why) + ')'}.",
        "",
    ]


def _per_configuration_section(report: Report) -> list[str]:
    if not report.verdicts:
        return []
    rows = []
    for v in report.verdicts:
        outside = ""
        if v.n_outside and v.n_outside.total:
            outside = f"; outside the frontier: {v.n_outside.below} below, {v.n_outside.above} above"
        if v.saving_lower_limit is not None:
            outside = f"; saving > {PCT(v.saving_lower_limit)} (beyond the frontier's data with confidence)" + outside
        rows.append(f"| `{v.name}` | {v.n_seeds} | {_ci(v.saving, PCT)} | {_ci(v.saving_blocks, PCT)} "
                    f"| {_ci(v.saving_vs_one_baseline, PCT)} | {_ci(v.loss_gap_vs_frontier, DIFF)} "
                    f"| {v.verdict}{outside} |")
    return _section(
        "Every configuration, every seed (no selection)",
        "Saving = 1 − F_run / F_single, F_single = the single-level FLOPs that reach the run's final "
        + ("held-out loss on the frontier's points (see below)." if report.frontier.available else
           "held-out loss on the one baseline's curve (no frontier among the runs)."),
        ("configuration", "seeds", "saving (default FLOPs)", "saving, coarse step = its blocks' share",
         "saving vs the one baseline", "val loss − frontier at equal FLOPs", "verdict"), rows,
        ["", "Default FLOPs count the head (a coarse step of gpt22m costs 0.77 of a fine step); the blocks-only "
         "column costs a coarse step at its share of the fine model's blocks (1/k), as the paper may have "
         "counted. A loss gap below 0 means lower held-out loss than the best single-level run with the same FLOPs."])


def _excluded_section(report: Report) -> list[str]:
    if not report.excluded:
        return []
    return _section("Left out (not in any statistic)", "", ("run", "configuration", "seed", "status", "why"),
                    (f"| `{e.run}` | `{e.label}` ({e.run_kind}) | {e.seed} | **{e.status}** | {e.reason} |"
                     for e in report.excluded))


def _held_out_section(report: Report) -> list[str]:
    h = _had(report.held_out)
    if h.se_median is None:
        return ["Held-out set: the runs did not record the standard error of their val loss.", ""]
    size = f"{h.tokens:,} tokens ({_had(h.sequences):,} sequences)" if h.tokens else "size not recorded"
    return [
        f"Held-out set: {size}, the same for every run. Standard error of a final val loss (over held-out "
        f"sequences): median {h.se_median:.4f}, max {_had(h.se_max):.4f}. Differences between runs on the same "
        "set are less noisy than that; the intervals over seeds carry the seed-to-seed noise.",
        "",
    ]


def _frontier_section(report: Report) -> list[str]:
    f = report.frontier
    lines = ["## The tuned single-level frontier", ""]
    if not f.available:
        return lines + [f"No budget frontier: {f.why}. Run single-level baselines at several LRs and budgets "
                        "(`optim.lr=...` × `train.budget=0.3,0.45,0.6,0.8,1.0,1.3`) for the fair reference.", ""]
    lines += [f"Built from {f.built_from}, on seed(s) {', '.join(map(str, f.seeds))}: per seed, the lower envelope "
              "of (total FLOPs, final val loss), whatever each run's settings.", "",
              *_table("seed", "total FLOPs", "final val loss", "from")]
    lines += [f"| {p.seed} | {FLOPS(p.flops)} | {LOSS(p.loss)} | `{p.name}` |" for p in f.points]
    lines += ["", *_table("train.budget", "configuration", "seeds", "mean total FLOPs", "mean final val loss")]
    lines += [f"| {c.budget:g} | `{c.name}` | {len(c.seeds)} | {FLOPS(c.mean_flops)} | {LOSS(c.mean_final_val_loss)} |"
              for c in f.configurations]
    lines += [
        "",
        "Read on the frontier: linear in log FLOPs between its points, per seed (the envelope of the means over "
        "seeds for a seed without its own)"
        + (f"; dominated budgets dropped from the mean envelope: {list(f.dominated_budgets)}" if f.dominated_budgets else "")
        + ". A run lower than the longest budget or higher than the shortest is *outside the frontier*: only a "
        "bound on its saving is known, and it is left out of the interval. A configuration's saving is only "
        "bounded where its runs lie beyond the frontier's data with 97.5% confidence, as an arm's verdict is "
        "decided (see the verdict table).",
        "",
        *_table("configuration", "seed", "total FLOPs", "final val loss", "single-level FLOPs on the frontier",
                "saving", "saving, blocks-only", "val loss − frontier at equal FLOPs"),
    ]
    for e in report.vs_frontier:
        for i, s in enumerate(e.per_seed):
            fl, sv = FLOPS(s.frontier_flops), PCT(s.saving)
            if s.outside:
                op, bound = _had(s.saving_bound)
                fl = "outside the frontier (" + ("below the longest budget" if s.outside == "below"
                                                 else "above the shortest budget") + ")"
                sv = f"{op} {PCT(bound)}"
            lines.append(f"| {f'`{e.name}`' if i == 0 else ''} | {s.seed}{'' if s.paired else '*'} | {FLOPS(s.flops)} "
                         f"| {LOSS(s.final_val_loss)} | {fl} | {sv} | {PCT(s.saving_blocks)} | {DIFF(s.loss_gap)} |")
        lines.append(f"| | **mean [95% CI]** | | | | {_ci(e.saving, PCT)} | {_ci(e.saving_blocks, PCT)} "
                     f"| {_ci(e.loss_gap, DIFF)} |")
    return lines + [""]


def _tuning_space_section(report: Report) -> list[str]:
    """Per budget the single-level settings tried (✓ kept by its arm, ★ on the frontier's envelope), and
    what each dimension beyond the plain LR grid gained."""
    f = report.frontier
    if not f.available or not f.tried_per_budget:
        return []
    lines = ["## The frontier's tuning space", "",
             "Every single-level run is a candidate, the schedule control's included (the control's own M is read "
             "on the frontier without its runs, every other arm's on the frontier with them). ✓ kept at that "
             "budget on the selection seeds; ★ on the frontier's envelope.", "",
             "| train.budget | schedule | settings | selection loss | |", "|---|---|---|---|---|"]
    lines += [f"| {f'{b.budget:g}' if i == 0 else ''} | {e.family} | {_setting_text(e.settings)} "
              f"| {LOSS(e.selection_loss)} | {('✓' if e.kept else '') + ('★' if e.on_frontier else '')} |"
              for b in f.tried_per_budget for i, e in enumerate(b.settings)]
    if f.gains:
        lines += ["", "What each dimension added: the frontier rebuilt without it; gain = the full frontier's points "
                  "read on that frontier's fit (M > 1: the dimension saves that factor of compute), and each arm's M "
                  "against it, read as its verdict is (on that frontier's points inside its data; \"M > x\" only "
                  "where the data decide a bound; \"(fit)\" where its fitted curve leads).", "",
                  *_table("without", "keeps", "gain", "arms' M against it")]
        for g in f.gains:
            arms = "; ".join(f"`{name}` " + _gain_cell(r) for name, r in g.arms.items()) or "—"
            gain = TIMES(g.gain_M) if g.fit_available else f"no fit ({g.why})"
            lines.append(f"| {g.dimension} | {g.restricted_to} | {gain} | {arms} |")
    return lines + [""]


def _gain_cell(r: GainReading) -> str:
    """An arm's M against a restricted frontier: "M > x" only where its data decide a bound."""
    if r.bound is not None:
        return f"M > {r.bound:.3g}" + (" (data only)" if r.kind == "data_only_bound" else "")
    interval = f" [{r.M_lo:.3g}, {r.M_hi:.3g}]" if r.M_lo is not None and r.M_hi is not None else ""
    return TIMES(r.M) + interval + (" (fit)" if r.kind in ("joint", "per_run") else "")


def _fixed_flops_section(report: Report) -> list[str]:
    fb = _had(report.fixed_flops)
    if not fb.rows:
        return []
    rows = []
    for row in fb.rows:
        cells = [LOSS(c.mean_loss) + (f"; Δ {_ci(c.diff, DIFF)}" if c.diff is not None and c.diff.n else "")
                 for c in row.cells]
        rows.append(f"| `{row.name}`{' **(baseline)**' if row.is_baseline else ''} | {' | '.join(cells)} |")
    return _section("Held-out loss at fixed FLOPs", "Val loss at fractions of the baseline's total FLOPs (interpolated "
                    "between evaluations; — past a run's end), and the paired difference from the baseline at the same "
                    "FLOPs (mid-run points are mid-schedule: the frontier compares finished schedules).",
                    ("configuration", *(f"{fr:g} × baseline ({FLOPS(f)})" for fr, f in zip(fb.flop_fractions, fb.flops))),
                    rows)


def _costs_section(report: Report) -> list[str]:
    if not report.uncounted_costs:
        return []
    return _section("Not on the FLOPs axis", "The per-cycle diagnostics (a coarse and a fine forward/backward on one "
                    "batch per coarse model) and held-out evaluation are measurements, not training: their FLOPs are "
                    "left out of every figure above.",
                    ("configuration", "diagnostics / training FLOPs", "evaluation / training FLOPs"),
                    (f"| `{c.name}` | {PCT(c.diag_share)} | {PCT(c.eval_share)} |" for c in report.uncounted_costs))
