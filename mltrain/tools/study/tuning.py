"""Where one pass over an arm's grid leaves its choice in doubt, the study tunes on (selection seeds only):

* edge: a chosen value at the end of the values tried gets one more value beyond it, at the grid's own
  ratio at that end (`grid_extensions` per side); the choice is then made again. The frontier's warm-up
  too, at each budget that runs every warm-up length (not a halved one): beyond the lengths of
  `frontier.warmup_fractions`, at their ratio, no longer than the run at that budget;
* neighbours: each budget's chosen frontier LR, where it is a grid value, gets its x sqrt(3) and
  / sqrt(3) neighbours (`frontier.lr_neighbours`);
* ties: the settings within `tie_nats` of the best on the selection seeds also run on the
  `extra_selection_seeds`, and the choice is made on the mean over every selection seed each has
  (mltrain-compare's rule); the second best of them is the runner-up, evaluated too;
* halving: with frontier.halving_from, the budgets above it run the frontier's grid at the best
  warm-ups (frontier.halving_keep) of the budget below, once that budget's runs have ended;
* control: once a budget's frontier choice is settled (no rule above adds to it), the control's schedule
  runs at that budget at the chosen fine LR and warm-up (plan.control_sweeps);
* bracketing: while an arm under test has its equal-loss point beyond the frontier's data, the frontier
  gets the next budget (3, 4, ... times the steps) up to `frontier.max_budget`. The control's own runs at
  the frontier's budgets are not arms under test: they never trigger it.

Every rule reads the runs on disk alone, so a study invoked again plans the same runs (and finds them
ended). Torch-free.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional

from mltrain.tools.study.rungs import SettingLosses
from mltrain.tools.study.plan import (BUDGET, FINE_LR, TUNE, WARMUP, Choice, Layout, Run, Sweep, control_sweeps,
                                      halved, halving_sweep, setting_sweep, setting_text, warmup_values)
from mltrain.tools.study.progress import ended, run_status
from mltrain.tools.study.schema import StudyConfig, frontier_arm

Setting = tuple  # a run's setting as sorted (key, value text) pairs: every swept key but the seed
Losses = dict  # Setting -> {seed: final val loss}; a diverged run counts as +inf
LR = FINE_LR


def setting_of(run: Run) -> Setting:
    return tuple(sorted(run.setting.items()))


def losses(runs: Iterable[Run]) -> Losses:
    """The final validation loss of every ended run, by setting and seed."""
    table: Losses = {}
    for run in runs:
        summary = run_status(run.dir)
        if not ended(summary):
            continue
        loss = summary.get("final_val_loss") if summary.get("status", "finished") == "finished" else None
        table.setdefault(setting_of(run), {})[run.seed] = float(loss) if isinstance(loss, (int, float)) else math.inf
    return table


def mean_loss(table: Losses, setting: Setting, seeds: Iterable[int]) -> Optional[float]:
    """The mean loss of a setting over those of `seeds` it has run on (None: none)."""
    found = [table.get(setting, {}).get(s) for s in seeds]
    found = [x for x in found if x is not None]
    return sum(found) / len(found) if found else None


def _number(text: str) -> Optional[float]:
    try:
        x = float(text)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 and text not in ("true", "false") else None


def _rounded(x: float, integral: bool) -> float:
    return float(max(1, round(x))) if integral else float(f"{x:.4g}")


def _grid_numbers(grid: list[str]) -> Optional[tuple[list[float], bool]]:
    nums = [n for n in (_number(g) for g in grid) if n is not None]
    if len(grid) < 2 or len(nums) < len(grid):
        return None
    return sorted(nums), all("." not in g and "e" not in g for g in grid)


def coarse_values(grid: list[str], cap: int) -> list[float]:
    """The grid's numbers and the values an edge may extend it by (cap per side)."""
    found = _grid_numbers(grid)
    if found is None:
        return []
    nums, integral = found
    up, down = nums[-1] / nums[-2], nums[0] / nums[1]
    return [*nums, *(_rounded(nums[-1] * up ** i, integral) for i in range(1, cap + 1)),
            *(_rounded(nums[0] * down ** i, integral) for i in range(1, cap + 1))]


def _tried(x: float, tried: Iterable[float]) -> bool:
    return any(math.isclose(x, t, rel_tol=1e-6) for t in tried)


def edge_value(grid: list[str], tried: list[str], chosen: str, cap: int) -> Optional[float]:
    """The next value beyond the end of the values tried that `chosen` sits at, at the grid's own ratio
    there; None when it sits inside, the key is not a positive number, or `cap` values lie beyond."""
    found, c = _grid_numbers(grid), _number(chosen)
    numbers = [x for t in tried if (x := _number(t)) is not None]
    if found is None or c is None or not numbers or min(numbers) < c < max(numbers):
        return None
    nums, integral = found
    up = c >= max(numbers)
    ratio, start = (nums[-1] / nums[-2], nums[-1]) if up else (nums[0] / nums[1], nums[0])
    for i in range(1, cap + 1):
        x = _rounded(start * ratio ** i, integral)
        if not _tried(x, numbers):
            return x
    return None


def neighbours(grid: list[str], tried: list[str], chosen: str, cap: int) -> list[float]:
    """The x sqrt(3) neighbours of a chosen coarse value (a grid value or an edge's) not tried yet."""
    c, numbers = _number(chosen), [x for t in tried if (x := _number(t)) is not None]
    if c is None or not _tried(c, coarse_values(grid, cap)):
        return []
    return [x for x in (_rounded(c * math.sqrt(3), False), _rounded(c / math.sqrt(3), False)) if not _tried(x, numbers)]


def tied(table: Losses, settings: Iterable[Setting], seeds: list[int], nats: float) -> list[Setting]:
    """The settings within `nats` of the best on `seeds`, best first, when there are two or more."""
    scored = sorted((m, s) for s in settings if (m := mean_loss(table, s, seeds)) is not None and math.isfinite(m))
    close = [s for m, s in scored if m <= scored[0][0] + nats] if scored else []
    return close if len(close) >= 2 else []


def runner_up(table: Losses, close: list[Setting], seeds: list[int], chosen: Setting) -> Optional[Setting]:
    """The best of the tied settings other than the chosen one, on the mean over every selection seed."""
    rest = sorted((mean_loss(table, s, seeds) or math.inf, s) for s in close if s != chosen)
    return rest[0][1] if rest else None


def next_budget(study: StudyConfig, budgets: list[str], tested: Iterable[Any]) -> Optional[str]:
    """The frontier's next budget (the next whole multiple of the steps) while some arm under test (`tested`:
    the verdict's entries of the study's arms, the frontier's own and the control's runs at the frontier's
    budgets left out) has its equal-loss point beyond the frontier's data, up to frontier.max_budget; None
    otherwise."""
    cap = study.frontier.max_budget
    if cap is None:
        return None
    beyond = [a for a in tested if a is not None and not a.is_frontier and a.multiplier is not None
              and a.multiplier.past_the_data]
    nxt = float(math.floor(max(map(float, budgets))) + 1)
    return setting_text(BUDGET, nxt) if beyond and nxt <= cap + 1e-9 else None


# ---------------------------------------------------------------------------------------------
# The runs the rules add


def more_sweeps(study: StudyConfig, layout: Layout, scale: str, max_steps: Optional[int], sweeps: list[Sweep],
                choices: dict[str, Choice], budgets: Optional[list[str]] = None) -> list[Sweep]:
    """The tuning runs the rules add, given the arms' tuning sweeps so far, stage 1's choices and the
    frontier's budgets (for successive halving); none that any of `sweeps` already holds."""
    planned = {r.dir for s in sweeps for r in s.runs()}
    frontier, out = frontier_arm(study), []
    control = choices.get(study.frontier.control_arm) if study.frontier.control_arm else None
    for arm, choice in choices.items():
        runs = [r for s in sweeps if s.dir == layout.sweep(scale, TUNE, arm) for r in s.runs()]
        table = losses(runs)
        picks = [{**s, BUDGET: b} for b, s in choice.by_budget.items()] if arm == frontier else [choice.setting]
        found = _halving(study, layout, scale, max_steps, budgets or [], runs, table) if arm == frontier else []
        for pick in picks:
            same = [r.setting for r in runs if r.setting.get(BUDGET) == pick.get(BUDGET)]
            wider = _wider(study, arm, arm == frontier, pick, same, table, max_steps)
            found += [setting_sweep(study, layout, scale, TUNE, arm, setting, seeds, max_steps) for setting, seeds in wider]
            if arm == frontier and not wider:  # the budget's choice is settled: the control's schedule at it
                found += control_sweeps(study, layout, scale, max_steps, {pick[BUDGET]: pick},
                                        control.setting if control else None)
        for sweep in found:
            if any(r.dir not in planned for r in sweep.runs()):
                out.append(sweep)
                planned |= {r.dir for r in sweep.runs()}
    return out


def _halving(study: StudyConfig, layout: Layout, scale: str, max_steps: Optional[int], budgets: list[str], runs: list[Run],
             table: Losses) -> list[Sweep]:
    """Successive halving over the warm-ups: each halved budget (plan.halved) whose budget below has ended
    runs gets the frontier's grid at that budget's halving_keep best warm-ups."""
    order, out, seeds = sorted(budgets, key=float), [], list(study.selection_seeds)
    for below, budget in zip(order, order[1:]):
        if not halved(study, budget):
            continue
        at = [r for r in runs if r.setting.get(BUDGET) == below]
        if not at or any(setting_of(r) not in table or r.seed not in table[setting_of(r)] for r in at):
            continue  # the budget below has not ended yet
        best: dict[str, float] = {}
        for r in at:
            m = mean_loss(table, setting_of(r), seeds)
            w = r.setting.get(WARMUP)
            if m is not None and w is not None:
                best[w] = min(best.get(w, math.inf), m)
        kept = sorted(best, key=lambda w: best[w])[:study.frontier.halving_keep]
        if kept:
            out.append(halving_sweep(study, layout, scale, max_steps, budget, kept))
    return out


def _wider(study: StudyConfig, arm: str, is_frontier: bool, pick: dict, same: list[dict], table: Losses,
           steps: Optional[int] = None) -> list:
    """(setting, seeds) to run for one chosen setting: its edges (the frontier's warm-up's too), its LR
    neighbours, its near ties."""
    cfg, out = study.arms[arm], []
    first = list(study.selection_seeds)
    warmups = warmup_values(study, steps) if is_frontier and steps else []
    for key, values in cfg.grid.items():
        if key == BUDGET or key not in pick or (key == WARMUP and warmups):  # the fractions' lengths ran instead
            continue
        grid = [setting_text(key, v) for v in values]
        tried = list(dict.fromkeys(s[key] for s in same if key in s))
        edge = edge_value(grid, tried, pick[key], study.grid_extensions)
        more = [edge] if edge is not None else []
        if is_frontier and key == LR and study.frontier.lr_neighbours:
            more += neighbours(grid, tried, pick[key], study.grid_extensions)
        out += [({**pick, key: setting_text(key, x)}, first) for x in more]
    beyond = _warmup_edge(study, pick, warmups, [s[WARMUP] for s in same if WARMUP in s], steps)
    out += [({**pick, WARMUP: beyond}, first)] if beyond is not None else []
    extra = list(study.extra_selection_seeds)
    if extra and not out and (study.frontier.ties or not is_frontier):  # ties once the grid brackets the choice
        for setting in tied(table, {tuple(sorted(s.items())) for s in same}, first, study.tie_nats):
            missing = [s for s in extra if s not in table.get(setting, {})]
            if missing:
                out.append((dict(setting), missing))
    return out


def _warmup_edge(study: StudyConfig, pick: dict, warmups: list[str], tried: list[str],
                 steps: Optional[int]) -> Optional[str]:
    """The frontier's warm-up length beyond the end of those tried where its choice at a budget sits there
    (at a budget that runs every length: a halved budget's follow the budget below), at the fractions'
    own ratio, no longer than the run at that budget; None when inside, or no new length is left."""
    if len(warmups) < 2 or not steps or WARMUP not in pick or BUDGET not in pick or halved(study, pick[BUDGET]):
        return None
    x = edge_value(warmups, list(dict.fromkeys(tried)), pick[WARMUP], study.grid_extensions)
    if x is None:
        return None
    x = min(x, float(max(1, round(float(pick[BUDGET]) * steps))))  # a warm-up as long as the whole run at most
    return None if _tried(x, [n for t in tried if (n := _number(t)) is not None]) else setting_text(WARMUP, int(x))


def settings_table(table: Losses, seeds: list[int]) -> list[SettingLosses]:
    """The per-setting selection losses, best first (what selection.json and ladder.json list)."""
    rows = [SettingLosses(dict(s), {str(k): v for k, v in sorted(by_seed.items())}, mean_loss(table, s, seeds))
            for s, by_seed in table.items()]
    return sorted(rows, key=lambda r: (math.inf if r.mean is None else r.mean, sorted(r.setting.items())))

