"""ladder.md, the study's ladder report in Markdown, rendered from its typed results (rungs.py) only."""

from __future__ import annotations

from typing import Callable, Optional

from mltrain.tools.compare import Arm, FitError, Multiplier
from mltrain.tools.study.rungs import Ladder, Rung, RungArm


def _pct(x: Optional[float]) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _span(lo: Optional[float], hi: Optional[float], unbounded: bool, fmt: Callable[[float], str]) -> str:
    if lo is None:
        return ""
    return f" [{fmt(lo)}, ∞)" if unbounded else (f" [{fmt(lo)}, {fmt(hi)}]" if hi is not None else "")


def params_text(n: float) -> str:
    """A parameter count as 22.4M, 58k."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def multiplier_text(m: Optional[Multiplier]) -> tuple[str, str]:
    """The rung's headline M and saving (compare's `headline`: a bound, the interpolated, the joint fit's or
    the per-run M), with its interval."""
    if m is None:
        return "—", "—"
    if m.bound is not None and m.bound.kind == "lower" and m.bound.value is not None:
        return f"M > {m.bound.value:.3f}", f"> {_pct(1 - 1 / m.bound.value)}"
    head = m.led_by()
    if head.M is None:
        return f"unavailable ({m.why or 'no reason given'})", "—"
    lo, hi, mid = head.M_lo, head.M_hi, head.M
    mark = (" †" if m.extrapolated and head.kind != "interpolated" else "") + {"interpolated": " (interpolated)"}.get(
        head.kind, "")

    def span(f) -> str:
        return _span(lo, hi, head.M_hi_unbounded, f)

    saving = lambda v: _pct(1 - 1 / v)  # noqa: E731
    return f"{mid:.3f}{span(lambda v: f'{v:.3f}')}{mark}", f"{saving(mid)}{span(saving)}"


def _ladder_settings(arm: Optional[Arm]) -> str:
    if arm is not None and arm.kept_by_budget:
        return "; ".join(f"budget {b}: " + ", ".join(f"{k}={v}" for k, v in s.items())
                         for b, s in sorted(arm.kept_by_budget.items(), key=lambda kv: float(kv[0])))
    return ", ".join(f"{k}={v}" for k, v in (arm.kept if arm is not None else {}).items()) or "—"


def _ladder_fit_error(fit_error: Optional[FitError]) -> str:
    if fit_error is None or not fit_error.available:
        return "—"
    return f"{fit_error.M_lo:.3f} to {fit_error.M_hi:.3f}"


def _ladder_row(ladder: Ladder, rung: Rung, row: RungArm, first: bool, extra: bool) -> str:
    """One study arm at one rung: the rung's size and fit error on its first row, the arm's settings and M."""
    x = f" {rung.x:g} |" if extra else ""
    head = (f"{rung.scale} |{x} {rung.n_params:,} | {rung.tokens_per_param:.1f} | {rung.max_steps:,} "
            f"| {_ladder_fit_error(rung.fit_error)}" if first else " |" + (" |" if extra else "") + " | | |")
    result = row.result
    m, saving = (multiplier_text(result.multiplier if result else None) if row.arm != ladder.frontier_arm
                 else ("the frontier", "—"))
    if result is not None and result.within_fit_error:
        m += " ‡"
    if not row.found:
        m, saving = "no result", "—"
    seeds = len(result.eval_seeds) if result is not None else 0
    return f"| {head} | {row.arm} | {_ladder_settings(result)} | {m} | {saving} | {seeds or '—'} |"


def _ladder_trend_lines(ladder: Ladder) -> list[str]:
    lines = []
    for t in ladder.trends:
        lines.append(f"- {t.sentence}")
        for p in t.predictions:
            lines.append(f"  - Extrapolation, not a measurement: at {params_text(p.n_params)} parameters "
                         f"({p.beyond_largest:.3g}x the largest scale) the fitted line gives M = {p.M:.3f} "
                         f"[{p.M_lo:.3f}, {p.M_hi:.3f}], if the trend held that far.")
    return lines


def _ladder_missing(ladder: Ladder) -> list[str]:
    missing = [f"- {r.scale}: no verdict ({r.why_no_verdict})" for r in ladder.rungs if r.why_no_verdict]
    missing += [f"- {r.scale}/{row.arm}: not in the verdict" for r in ladder.rungs
                for row in r.arms if not row.found and not r.why_no_verdict]
    missing += [f"- {m}" for r in ladder.rungs for m in r.missing_runs]
    return missing or ["Nothing: every run ended and every scale has its verdict."]


def render_ladder(ladder: Ladder, word: str) -> str:
    """ladder.md from the study's ladder report; `word` names its axis in a sentence ("depth", "width", "N")."""
    along = "scale" if ladder.axis == "params" else word
    # One rung is a check at one setting (adamw_check), not a ladder: its title says so.
    one = len(ladder.rungs) == 1
    title = f"the verdict at one rung ({ladder.rungs[0].scale})" if one else f"does the saving survive along {along}?"
    lines = [f"# Study {ladder.study}: {title}", "",
             f"Per rung, each arm tuned on the selection seeds and measured on the evaluation seeds against "
             f"the tuned single-level frontier (arm `{ladder.frontier_arm}`); the numbers are "
             "mltrain-compare's (`<scale>/verdict/comparison.md`). M: the compute multiplier (the frontier's "
             "FLOPs for the same held-out loss over the run's FLOPs); saving = 1 - 1/M; 95% intervals. "
             "The fit's own error: M read at the frontier's own points (each configuration's at each FLOPs, over "
             "the evaluation seeds), which a perfect fit would put at 1; an arm whose M lies inside that range (‡) "
             "is within the fit's error, not a saving.", "",
             f"## Trend along {along}" + (" (one rung: none to tell)" if one else ""), ""]
    lines += _ladder_trend_lines(ladder)
    extra = ladder.axis not in ("params", "tokens_per_param")
    lines += ["", "## Per rung", "",
              f"| scale |{f' {word} |' if extra else ''} parameters | tokens/param | steps | fit's own error (M) "
              "| arm | tuned settings | M [95%] | saving [95%] | eval seeds |",
              "|---|" + ("---|" if extra else "") + "---|---|---|---|---|---|---|---|---|"]
    lines += [_ladder_row(ladder, r, row, i == 0, extra) for r in ladder.rungs for i, row in enumerate(r.arms)]
    lines += ["", "† beyond the frontier's data: the fitted frontier extrapolated (see the scale's comparison.md). "
              "‡ within the fit's own error at that rung: not a saving. M > x: the arm's runs lie below the "
              "frontier's lowest loss (with 97.5% confidence, or some of them with no fit to trust), only a lower "
              "confidence limit (no point for the trend). [lo, ∞): too many degenerate bootstrap draws for an upper "
              "end (no point for the trend either)."]
    notes = [(r.scale, w) for r in ladder.rungs for w in r.warnings]
    if notes:
        lines += ["", "## Warnings (from the verdicts)", ""] + [f"- {scale}: {w}" for scale, w in notes]
    lines += ["", "## Missing", ""] + _ladder_missing(ladder)
    return "\n".join(lines) + "\n"
