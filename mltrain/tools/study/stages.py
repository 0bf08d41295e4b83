"""A study, stage by stage, scale by scale.

    check everything (compose and validate every setting, earlier runs on disk)   before any run
    for each scale:
      1 tune      one sweep per arm: its grid on the selection seeds
                  mltrain-compare on each arm's runs chooses its setting (and the frontier's per budget)
      2 evaluate  the chosen settings on the evaluation seeds; the frontier's budgets at theirs
      3 verdict   mltrain-compare on the scale: tuned frontier, multiplier, intervals
    4 ladder      the report across scales

Resumable and idempotent: a sweep all of whose runs have ended (summary.json: finished or diverged)
is not launched at all; any other is launched whole with train.resume=true, so mltrain skips its
ended runs, resumes the interrupted ones and starts the rest. The choices and the reports are made
again from the runs on disk every time, by mltrain-compare (the one place the selection rule lives).
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TextIO

from mltrain.core.errors import ConfigError, MltrainError
from mltrain.core.interrupts import CtrlC
from mltrain.core import guarded
from mltrain.core.plain import plain
from mltrain.runs import rundir
from mltrain.runs.provenance import redact_tree
from mltrain.tools.compare import Multiplier, Report, compare_report
from mltrain.tools.study.rungs import ArmTuning, RunnerUp, RungTuning
from mltrain.runs import environment
from mltrain.tools.study import compose, ladder, records, tuning
from mltrain.tools.study.compose import setting_key
from mltrain.tools.study.launch import STOPPED, Interrupts, Stopped, multirun, output_to
from mltrain.tools.study.plan import (AT_FRONTIER, COARSE_STEPS, EVAL, RUNNER_UP, TUNE, Choice, Layout, Run, Sweep,
                                      evaluation_run_count, evaluation_sweeps, possible_evaluation_runs,
                                      setting_text, tuning_sweeps)
from mltrain.tools.study.planned import MEASURED_START_S
from mltrain.tools.study.progress import Progress, Watcher, ended, failure_reason, measured, run_status
from mltrain.tools.study.sanity import check_held_out, repeated_data, run_cost
from mltrain.tools.study.schema import BUDGET, StudyConfig, eval_seeds, frontier_arm, selection_seeds, varied_keys
from mltrain.tools.study import window as time_window
from mltrain.tools.study.window import Window, WindowClosed, closing_line

if TYPE_CHECKING:  # the training stack is imported when a run config is made, not with this module
    from mltrain.config import Config

MAX_ROUNDS = 20  # tuning rounds per scale and budget set: a safeguard (each round adds only what the rules ask)


@dataclass
class Study:
    """A checked study and what this invocation has done so far."""

    cfg: StudyConfig
    layout: Layout
    sizes: dict[str, compose.ScaleSize]
    kinds: dict[tuple[str, str], str]
    labels: dict[str, dict[str, str]]
    out: Optional[TextIO]  # where the study's own lines go; None: the console
    progress: Optional[Progress] = None
    launched: int = 0  # sweeps launched by this invocation
    failures: dict[str, str] = field(default_factory=dict)  # run name -> why it did not end
    interrupts: CtrlC = field(default_factory=lambda: Interrupts())
    configs: dict[tuple, Config] = field(default_factory=dict)  # (scale, arm, setting) -> its typed run config
    counted: set = field(default_factory=set)  # run folders the progress has in its total
    tuning: dict[str, RungTuning] = field(default_factory=dict)  # scale -> what its tuning tried and chose (ladder.json)

    costs: dict[tuple, float] = field(default_factory=dict)  # (scale, arm, setting) -> its planned FLOPs
    window: Optional[Window] = None  # --for / --until: no run launched that would end after it
    accepted: dict[str, list[str]] = field(default_factory=dict)  # allow_env_change: value -> the values seen

    def shown(self) -> Progress:
        """The progress the stages report through: `run` sets it before the first stage."""
        if self.progress is None:
            raise RuntimeError("the study's progress is read before `run` set it")
        return self.progress

    def cost(self, run: Run) -> float:
        """A run's planned FLOPs, every phase of its plan (mltrain/method/cost.py)."""
        return self.setting_cost(run.sweep.scale, run.sweep.arm, run.setting)

    def setting_cost(self, scale: str, arm: str, setting: dict[str, str]) -> float:
        """The planned FLOPs of a run of `setting`: its composed config's; a setting no tuning run has (an
        evaluation budget off the grid, a setting the tuning rules added) costs the arm's first composed
        setting (else the scale's) times its budget."""
        key = (scale, *setting_key(arm, setting))
        if key not in self.costs:
            cfg = self.configs.get(key)
            if cfg is not None:
                self.costs[key] = run_cost(cfg)[0]
            else:  # the arm's first composed setting, else the scale's (a control run at a frontier budget)
                near = next((k for k in self.configs if k[:2] == (scale, arm)), None)
                near = near or next((k for k in self.configs if k[0] == scale), None)
                if near is None:
                    return 0.0  # nothing composed for this scale: no estimate (and no cached guess)
                ratio = float(setting.get(BUDGET, 1.0)) / float(dict(near[2]).get(BUDGET, 1.0))
                self.costs[key] = run_cost(self.configs[near])[0] * ratio
        return self.costs[key]


def prepare(cfg: StudyConfig, out: Optional[TextIO] = None) -> Study:
    """Every check, before any run starts: ConfigError (one line) for the first problem."""
    compose.check_seeds(cfg)
    with compose.Composer() as composer:
        sizes = compose.ladder_sizes(cfg, composer)
        layout = Layout(Path(cfg.dir).resolve(), {name: size.max_steps for name, size in sizes.items()})
        tuning = [s for scale in cfg.ladder for s in tuning_sweeps(cfg, layout, scale, sizes[scale].max_steps)]
        composed, configs = compose.check_settings(cfg, tuning, sizes, composer)
    kinds = compose.arm_kinds(configs)
    frontier = frontier_arm(cfg)
    if any(kind != "single" for (_, arm), kind in kinds.items() if arm == frontier):
        raise ConfigError(f"arm {frontier} sweeps {BUDGET}, the frontier's axis, but its runs are not single-level "
                          f"(experiment={cfg.arms[frontier].experiment}): only the single-level arm makes the frontier")
    labels = compose.check_labels(cfg, sizes, kinds)
    earlier = [r for s in tuning for r in s.runs()]
    earlier += [r for scale in cfg.ladder for r in possible_evaluation_runs(cfg, layout, scale) if r.dir.exists()]
    compose.check_earlier_runs(earlier, composed)
    accepted = records.check_environment(cfg, layout, next(iter(configs.values()), None))  # made elsewhere: refused
    guarded.refuse_linked(_owned_paths(cfg, layout), layout.root)  # no write of the study through a link
    study = Study(cfg, layout, sizes, kinds, labels, out, configs=configs, accepted=accepted)
    check_held_out(study)  # every arm on the frontier's held-out set, or no verdict could use it
    return study


def _owned_paths(cfg: StudyConfig, layout: Layout) -> list[Path]:
    """Every file and folder the study writes itself or has its runs write (each must not be a link)."""
    paths = [layout.log, layout.root / "study.json", layout.root / ".gitignore", layout.root / records.ENVIRONMENT,
             *(layout.ladder.with_suffix(s) for s in (".md", ".json", ".png"))]
    for scale in cfg.ladder:
        paths += [layout.selection(scale), _basis_file(layout, scale)]
        paths += [layout.verdict(scale) / f"comparison.{s}" for s in ("md", "json", "png")]
        paths += [r.dir for s in tuning_sweeps(cfg, layout, scale) for r in s.runs()]
        paths += [r.dir for r in possible_evaluation_runs(cfg, layout, scale)]
    return paths


def run(study: Study, command: str) -> int:
    """Run every stage; 0 when every run ended finished and every scale has its verdict (or when the time
    window ended first: one line says what is done and how to continue), 1 otherwise, 130 after Ctrl-C
    (one line says how to continue)."""
    cfg, layout = study.cfg, study.layout
    out = study.out or sys.stdout
    if study.window is not None:
        study.window.parallel = _parallel(cfg)
    try:
        # One study per folder at a time; what the sweeps print goes to study.log, the study's lines here.
        with rundir.claim(layout.root, what="dir", earlier=lambda _: None), output_to(layout.log) as console, \
                study.interrupts:
            record = redact_tree(plain(cfg))  # secrets as run.json keeps them out
            guarded.write_json(layout.root / "study.json", record, root=layout.root, indent=2)
            try:
                study.progress = _progress(study, study.out or console)
                results = [_scale(study, scale) for scale in cfg.ladder]
            finally:  # what may be committed and carried to another machine: the records, never the weights
                records.write_gitignore(layout.root)
                records.write_environment(layout, study.accepted)
            report = ladder.ladder_report(cfg.name, list(cfg.arms), frontier_arm(cfg), results, list(cfg.predict_params),
                                          cfg.ladder_axis, tuning=study.tuning)
            ladder.write_ladder(report, layout.ladder, root=layout.root)
            _note_accepted(study)
    except KeyboardInterrupt as stop:
        print(f"mltrain-study: stopped; every finished run is kept and interrupted ones resume: continue with "
              f"the same command: {command}", file=out, flush=True)
        return stop.status if isinstance(stop, Stopped) else 130  # 143 after SIGTERM, 130 after Ctrl-C
    except WindowClosed:
        if study.window is None:  # raised only within a time window (--for / --until)
            raise
        print(_window_line(study, study.window, command), file=out, flush=True)
        return 0
    for trend in report.trends:
        print(trend.sentence, file=out)
    if warning := repeated_data(cfg, layout):  # a run passed one epoch of its training split
        print(warning, file=out)
    if accepted := records.accepted_sentence(study.accepted):
        print(accepted, file=out)
    incomplete = sum(len(r.missing_runs) for r in report.rungs)
    no_verdict = [r.scale for r in report.rungs if r.why_no_verdict]
    print(f"mltrain-study: ladder report {layout.ladder.with_suffix('.md')}; {study.launched} sweep(s) launched"
          + (f"; {incomplete} run(s) did not finish" if incomplete else "")
          + (f"; no verdict at {', '.join(no_verdict)}" if no_verdict else ""), file=out, flush=True)
    return 1 if incomplete or no_verdict else 0


def _note_accepted(study: Study) -> None:
    """ladder.md says which environment changes allow_env_change accepted (environment.json lists them)."""
    sentence = records.accepted_sentence(study.accepted)
    if sentence:
        path = study.layout.ladder.with_suffix(".md")
        text = path.read_text(encoding="utf-8")
        guarded.write_text(path, text.rstrip("\n") + "\n\n" + _capital(sentence.removeprefix("mltrain-study: "))
                           + "\n", root=study.layout.root)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _window_line(study: Study, window: Window, command: str) -> str:
    """Runs done / planned, FLOPs done / planned, the estimate of the rest, and the command that continues."""
    progress = study.progress
    ended_runs = [s for d in study.counted if ended(s := run_status(d))]
    flops_done = sum(taken[1] for s in ended_runs if (taken := measured(s)) is not None)
    left = max(progress.cost_left, 0.0) if progress is not None else 0.0
    # this invocation's rate, else that of the runs finished on this machine before (the progress's)
    rate = window.rate or (progress.seconds / progress.flops if progress is not None and progress.flops > 0 else None)
    estimate = rate * left / _parallel(study.cfg) if rate is not None else None
    done, total = (progress.done, progress.total) if progress is not None else (len(ended_runs), len(study.counted))
    return closing_line(window, done, total, flops_done, flops_done + left, estimate, command)


def _base_budgets(cfg: StudyConfig) -> list[str]:
    return [setting_text(BUDGET, b) for b in cfg.arms[frontier_arm(cfg)].grid[BUDGET]]


def _base_tuning(study: Study, scale: str, budgets: Optional[list[str]] = None) -> list[Sweep]:
    """The tuning sweeps known before any choice: every arm's grid (tuning.more_sweeps adds the rest)."""
    cfg, layout, steps = study.cfg, study.layout, study.sizes[scale].max_steps
    budgets = budgets if budgets is not None else _base_budgets(cfg)
    return tuning_sweeps(cfg, layout, scale, steps, budgets)  # the control's schedule follows each budget's choice


def _progress(study: Study, out: TextIO) -> Progress:
    """The runs to count and their planned FLOPs; the finished ones' summaries give the first rate."""
    cfg, total, done, cost_left = study.cfg, 0, 0, 0.0
    progress = Progress(out, 0, 0, 0.0, _parallel(cfg), start_s=MEASURED_START_S)
    for scale in cfg.ladder:
        runs = [r for s in _base_tuning(study, scale) for r in s.runs()]
        study.counted |= {r.dir for r in runs}
        cost_left += _evaluation_cost(study, scale)
        ended_eval = _ended_evaluation(study, scale, read_choices(cfg, study.layout, scale)[0])
        done += len(ended_eval)
        cost_left -= sum(study.cost(r) for r in ended_eval)
        total += len(runs) + evaluation_run_count(cfg, scale)
        for r in ended_eval:
            _measure(progress, run_status(r.dir) or {})
        for r in runs:
            summary = run_status(r.dir)
            if ended(summary):
                done += 1
                _measure(progress, summary)
            else:
                cost_left += study.cost(r)
    progress.total, progress.done, progress.cost_left = total, done, cost_left
    return progress


def _measure(progress: Progress, summary: dict) -> None:
    """A run ended earlier counts into the ETA's rate when it ran on this machine (or did not say where):
    seconds measured on another machine say nothing of this one's."""
    if "environment" not in summary or environment.same_machine(summary):
        progress.measure(summary)


def _evaluation_cost(study: Study, scale: str) -> float:
    """Planned FLOPs of a scale's evaluation runs before stage 1 chooses (the runs
    plan.evaluation_run_count counts): per arm, the mean cost of its composed settings per unit of budget,
    on every evaluation seed, at each budget of the frontier's grid for the frontier arm (at 1 for the
    others). Per unit of budget, because before stage 1 only the first budget's settings may be composed
    (successive halving adds the others' tuning runs as it chooses)."""
    cfg, seeds, flops = study.cfg, len(eval_seeds(study.cfg, scale)), 0.0
    frontier = frontier_arm(cfg)
    for arm in cfg.arms:
        per_budget = [study.setting_cost(scale, arm, dict(setting)) / float(dict(setting).get(BUDGET, 1.0))
                      for (s, a, setting) in study.configs if (s, a) == (scale, arm)]
        if per_budget:
            budgets = [float(b) for b in cfg.arms[arm].grid[BUDGET]] if arm == frontier else [1.0]
            flops += seeds * sum(per_budget) / len(per_budget) * sum(budgets)
    return flops


def _parallel(cfg: StudyConfig) -> int:
    """Runs that train at once: the local launcher's jobs (the basic launcher runs one at a time)."""
    return max(1, cfg.launcher.n_jobs or 1) if cfg.launcher.name == "local" else 1


def _grow(study: Study, runs: list[Run]) -> None:
    """Runs the rules added (and the progress does not count yet) join its total."""
    new = [r for r in runs if r.dir not in study.counted]
    study.counted |= {r.dir for r in new}
    done = [r for r in new if ended(run_status(r.dir))]
    if new and study.progress is not None:
        study.progress.grow(len(new), len(done), sum(study.cost(r) for r in new if r not in done))


def _standard(study: Study, scale: str, runs: list[Run]) -> list[Run]:
    """The evaluation runs the progress counts from the start (plan.evaluation_run_count): no runner-up, no
    bracketing budget, not the control's schedule where it won a budget (those join as `_grow` finds them)."""
    base = set(_base_budgets(study.cfg))
    return [r for r in runs if not r.sweep.dir.name.endswith((RUNNER_UP, AT_FRONTIER))
            and (BUDGET not in r.setting or r.setting[BUDGET] in base)]


def _scale(study: Study, scale: str) -> ladder.ScaleResult:
    cfg, size = study.cfg, study.sizes[scale]
    budgets = _base_budgets(cfg)
    counted = _ended_evaluation(study, scale, read_choices(cfg, study.layout, scale)[0])
    first = True
    while True:
        tuned, choices = _tune(study, scale, budgets)
        evaluation = evaluation_sweeps(cfg, study.layout, scale, choices, size.max_steps)
        runs = [r for s in evaluation for r in s.runs()]
        if first:
            _recount(study, counted, [r for r in _standard(study, scale, runs) if ended(run_status(r.dir))])
            study.counted |= {r.dir for r in _standard(study, scale, runs)}
            first = False
        _grow(study, runs)
        _launch(study, evaluation)
        judged = [s for s in evaluation if not s.dir.name.endswith(RUNNER_UP)]
        result = _verdict(study, scale, [r for s in (*tuned, *judged) for r in s.runs()])
        budget = tuning.next_budget(cfg, budgets, _under_test(study, scale, result))
        if budget is None or budget in budgets:
            break
        study.shown().say(f"mltrain-study: {scale}: an arm's equal-loss point lies beyond the frontier's data: "
                          f"the frontier gets budget {budget}")
        budgets.append(budget)
    everything = [r for s in (*tuned, *evaluation) for r in s.runs()]
    _say_left_out(study, scale, everything)
    study.tuning[scale] = _tuning_record(study, scale, budgets, [*tuned, *evaluation], choices)
    result.missing = _missing(study, everything)
    result.missing += [f"{scale}/{arm}: stage 1 chose no setting, so it was not evaluated"
                       for arm in cfg.arms if arm not in choices]
    return result


def _under_test(study: Study, scale: str, result: ladder.ScaleResult) -> list:
    """The verdict's entries of the study's arms other than the frontier (bracketing reads these alone: not
    the control's own runs at the frontier's budgets, which the verdict lists as arms of their own)."""
    if result.comparison is None:
        return []
    arms, f = result.comparison.arms, frontier_arm(study.cfg)
    return [ladder.find_arm(arms, study.labels[scale][a], study.kinds[(scale, a)]) for a in study.cfg.arms if a != f]


def _tune(study: Study, scale: str, budgets: list[str]) -> tuple[list[Sweep], dict[str, Choice]]:
    """Stage 1 at these frontier budgets: the grids, then what the tuning rules add, until they add nothing."""
    cfg, steps = study.cfg, study.sizes[scale].max_steps
    sweeps, choices = _base_tuning(study, scale, budgets), {}
    for _ in range(MAX_ROUNDS):
        _grow(study, [r for s in sweeps for r in s.runs()])
        _launch(study, sweeps)
        choices = _choose(study, scale, sweeps)
        more = tuning.more_sweeps(cfg, study.layout, scale, steps, sweeps, choices, budgets)
        if not more:
            break
        sweeps += more
    return sweeps, choices


def _say_left_out(study: Study, scale: str, planned: list[Run]) -> None:
    """One line naming the run folders of the scale that this config does not ask for (its grid, arms or
    seeds changed since they ran): they stay on disk, and neither the choice nor the verdict reads them."""
    layout = study.layout
    asked = {r.dir for r in (*planned, *possible_evaluation_runs(study.cfg, layout, scale))}
    found = [d for stage in (TUNE, EVAL) for d in sorted(layout.scale(scale).glob(f"{stage}/*/*"))
             if d.is_dir() and not d.is_symlink() and (d / "metrics.jsonl").exists() and d not in asked]
    if found:
        shown = ", ".join(str(d.relative_to(layout.scale(scale))) for d in found[:3]) + (", ..." if len(found) > 3 else "")
        study.shown().say(f"mltrain-study: {scale}: {len(found)} run folder(s) on disk are not asked for by this "
                          f"config (its grid, arms or seeds changed since): left out of the choice and the "
                          f"verdict ({shown})")


def _existing(runs: list[Run]) -> list[Path]:
    """The folders of these runs that exist (the runs the config asks for, as far as they have run)."""
    return [r.dir for r in runs if r.dir.is_dir()]


def _ended_evaluation(study: Study, scale: str, choices: Optional[dict[str, Choice]]) -> list[Run]:
    """The evaluation runs of these choices that have ended (none before stage 1 has chosen)."""
    sweeps = evaluation_sweeps(study.cfg, study.layout, scale, choices) if choices else []
    return [r for r in _standard(study, scale, [r for s in sweeps for r in s.runs()]) if ended(run_status(r.dir))]


def _recount(study: Study, counted: list[Run], now: list[Run]) -> None:
    """The progress counted as done the evaluation runs of the choice it found at start; when stage 1
    chooses again (new tuning runs), those of the new choice are the ones done."""
    if study.progress is not None:
        study.progress.recount(len(now) - len(counted), sum(map(study.cost, now)) - sum(map(study.cost, counted)))


def _launch(study: Study, sweeps: list[Sweep]) -> None:
    """Launch the sweeps that hold a run not ended yet, one after another in one process; report each
    run that ends or fails. Within a time window, batch by batch: only the runs estimated to end inside
    it (window.py); WindowClosed when the window ends, or when the next run would end after it."""
    tried: set = set()  # the runs launched by this call (one that failed is not launched again)
    while True:
        todo = [s for s in sweeps if any(r.dir not in tried and not ended(run_status(r.dir)) for r in s.runs())]
        if not todo:
            return
        batch = todo if study.window is None else _within_window(study, study.window, todo, tried)
        if not batch:
            raise WindowClosed
        tried |= {r.dir for s in batch for r in s.runs()}
        _launch_batch(study, batch)
        if study.window is None:
            return


def _within_window(study: Study, window: Window, todo: list[Sweep], tried: set) -> list[Sweep]:
    """The sweeps of `todo` whose runs end inside the window (all of them when they do), else the runs
    that do, each as a sweep of its own (same folder, same line but one value per key)."""
    runs = [(s, r) for s in todo for r in s.runs() if r.dir not in tried and not ended(run_status(r.dir))]
    n = window.fitting([study.cost(r) for _, r in runs])
    if n == len(runs):
        return todo
    batch = []
    for sweep in todo:
        chosen = [r for s, r in runs[:n] if s is sweep]
        if chosen and len(chosen) == sum(s is sweep for s, _ in runs):
            batch.append(sweep)
        else:
            batch += [replace(sweep, swept=tuple((k, (v,)) for k, v in r.values)) for r in chosen]
    return batch


def _launch_batch(study: Study, todo: list[Sweep]) -> None:
    pending = [r for s in todo for r in s.runs() if not ended(run_status(r.dir))]
    if not pending:
        return
    log = study.layout.log
    offset = log.stat().st_size
    finished: list[dict] = []

    def on_end(run: Run, summary: dict) -> None:
        if summary.get("status") != "finished":
            study.failures[run.name] = f"{summary.get('status')}: {summary.get('status_reason', '')}"
        else:
            finished.append(summary)
        study.shown().ended(run, summary, study.cost(run))

    window = study.window
    lines = [s.overrides(study.cfg, study.sizes[s.scale].tags) for s in todo]
    # the batch's folders are left out of the records before they exist: a commit while they train skips them
    records.write_gitignore(study.layout.root, [r.dir for r in pending])
    started = time_window.now()
    with Watcher(pending, on_end) as watcher:
        code = multirun(lines, _run_env(study.cfg), **({"stop": _window_ends(window)} if window else {}))
        study.launched += len(todo)
    if window is not None:
        window.measured(time_window.now() - started, [t for s in finished if (t := measured(s)) is not None])
    if study.interrupts.requested or (code in STOPPED and not (window and window.stopped)):
        raise Stopped(code if code in STOPPED else 130)
    if window is not None and window.stopped:
        raise WindowClosed
    with open(log, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", errors="replace")
    for run in watcher.pending:
        why = failure_reason(run, text)
        study.failures[run.name] = why
        study.shown().settle(run, study.cost(run), f"FAILED: {why}")


def _run_env(cfg: StudyConfig) -> dict[str, str]:
    """The runs' environment: the launcher's, and the changes allow_env_change accepts (a run resumed
    where one differs would refuse itself otherwise: mltrain/runs/environment.py check_resume)."""
    accept = {environment.ALLOW_VARIABLE: ",".join(cfg.allow_env_change)} if cfg.allow_env_change else {}
    return {**cfg.launcher.env, **accept}


def _window_ends(window: Window):
    def ends() -> bool:
        if window.closed():
            window.stopped = True
        return window.stopped
    return ends


# ---------------------------------------------------------------------------------------------
# mltrain-compare: the choice of stage 1 and the verdict of stage 3


def _compare(paths: list[Path], **kwargs: Any) -> Report:
    return compare_report([str(p) for p in paths], **kwargs)


def _on_values(values: list[str], key: str, value: Any) -> str:
    """The runs' own text for a value compare chose (compare reads values back from the runs)."""
    text = setting_text(key, value)
    for v in values:
        if v == text or _same_number(v, text):
            return v
    raise ConfigError(f"mltrain-compare chose {key}={value}, which is not among the values tried {values}")


def _same_number(a: str, b: str) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    except ValueError:
        return False


def _arm_runs(layout: Layout, scale: str, sweeps: list[Sweep], folder: str) -> list[Run]:
    return [r for s in sweeps if s.dir == layout.sweep(scale, TUNE, folder) for r in s.runs()]


def _choose(study: Study, scale: str, sweeps: list[Sweep]) -> dict[str, Choice]:
    """Stage 1's choice per arm, by mltrain-compare on the arm's tuning runs (`sweeps`) over every selection
    seed; the frontier's per budget, where the control's schedule may win; written to selection.json."""
    cfg, choices, basis, record = study.cfg, {}, {}, {}
    for name in cfg.arms:
        runs = _arm_runs(study.layout, scale, sweeps, name)
        try:
            choice = _choose_arm(study, scale, name, runs)
        except (MltrainError, OSError) as err:
            study.shown().say(f"mltrain-study: {scale}/{name}: stage 1 chose nothing: {err}")
            continue
        if name == frontier_arm(cfg):
            choice.control_by_budget = _control_wins(study, scale, sweeps, choice, tuning.losses(runs))
        if choice.setting or choice.by_budget:
            choices[name] = choice
            used = runs + (_arm_runs(study.layout, scale, sweeps, cfg.frontier.control_arm + AT_FRONTIER)
                           if name == frontier_arm(cfg) and cfg.frontier.control_arm else [])
            basis[name] = {"digest": choice_basis(used, choice), "runs": sorted(r.name for r in used)}
            record[name] = {"setting": choice.setting, "by_budget": choice.by_budget,
                            "control_by_budget": choice.control_by_budget, "runner_up": choice.runner_up,
                            "selection_losses": [row.to_json() for row in
                                                 tuning.settings_table(tuning.losses(runs), selection_seeds(cfg))]}
    guarded.write_json(study.layout.selection(scale), {
        "scale": scale, "selection_seeds": selection_seeds(cfg), "arms": record}, root=study.layout.root, indent=2)
    guarded.write_json(_basis_file(study.layout, scale), basis, root=study.layout.root, indent=2)
    return choices


def _choose_arm(study: Study, scale: str, name: str, runs: list[Run]) -> Choice:
    """One arm's choice (MltrainError when there is none to make); a near tie names its runner-up."""
    cfg = study.cfg
    if not _existing(runs):
        raise MltrainError("none of its tuning runs is on disk")
    keys = [k for k in dict.fromkeys(k for r in runs for k in r.setting) if k != BUDGET]
    tried = {k: list(dict.fromkeys(r.setting[k] for r in runs if k in r.setting)) for k in (*keys, BUDGET)}
    found = _compare(_existing(runs), out=None, select_seeds=selection_seeds(cfg), tune=keys, plot=False)
    kind = study.kinds[(scale, name)]
    label = compose.arm_label(cfg, scale, name, study.sizes[scale].max_steps, kind, keys)
    arms = found.arms
    entry = arms[0] if len(arms) == 1 else ladder.find_arm(arms, label, kind)
    if entry is None:
        raise ConfigError(f"no arm labelled {label!r} among {[a.label for a in arms]}")
    by_budget = {_on_values(tried[BUDGET], BUDGET, b): {k: _on_values(tried[k], k, v) for k, v in s.items() if k in keys}
                 for b, s in entry.kept_by_budget.items()} if name == frontier_arm(cfg) else {}
    setting = {k: _on_values(tried[k], k, v) for k, v in entry.kept.items() if k in keys}
    choice = Choice(setting, by_budget)
    if name != frontier_arm(cfg) and setting and cfg.extra_selection_seeds:
        table = tuning.losses(runs)
        close = tuning.tied(table, table, list(cfg.selection_seeds), cfg.tie_nats)
        second = tuning.runner_up(table, close, selection_seeds(cfg), tuple(sorted(setting.items())))
        choice.runner_up = dict(second) if second else {}
    return choice


def _control_wins(study: Study, scale: str, sweeps: list[Sweep], choice: Choice, single: tuning.Losses) -> dict:
    """The budgets where the control's schedule beat the frontier's own best setting on the selection seeds:
    budget -> the control's setting there. The control arm's own runs (budget 1, its own length) are not
    among them: they are its arm's, evaluated as such, and join the verdict's frontier at their FLOPs."""
    control, seeds = study.cfg.frontier.control_arm, selection_seeds(study.cfg)
    if control is None:
        return {}
    table = tuning.losses(_arm_runs(study.layout, scale, sweeps, control + AT_FRONTIER))
    wins = {}
    for budget, setting in choice.by_budget.items():
        own = tuning.mean_loss(single, tuple(sorted({**setting, BUDGET: budget}.items())), seeds)
        rivals = [(m, s) for s in table if dict(s).get(BUDGET, "1.0") == budget
                  and (m := tuning.mean_loss(table, s, seeds)) is not None]
        if own is not None and rivals and min(rivals)[0] < own:
            wins[budget] = {k: v for k, v in min(rivals)[1] if k != BUDGET}
    return wins


def _basis_file(layout: Layout, scale: str) -> Path:
    """Beside selection.json: each arm's choice_basis, what its record there must come out of to be believed."""
    return layout.selection(scale).with_name(".selection.basis.json")


def _tuning_runs(cfg: StudyConfig, layout: Layout, scale: str, arm: str) -> list[Run]:
    return next(s for s in tuning_sweeps(cfg, layout, scale) if s.arm == arm).runs()


def choice_basis(runs: list[Run], choice: Choice) -> str:
    """What a choice was made from and what it is, as one digest: each tuning run's folder and its
    summary.json, and the chosen setting. It is kept beside selection.json; a record whose digest does not
    come out of the runs the config asks for now (edited by hand, or its runs or grid changed) is not
    believed."""
    return _digest([(r.name, r.dir) for r in runs], choice)


def _digest(runs: list[tuple[str, Path]], choice: Choice) -> str:
    h = hashlib.sha256()
    for name, folder in sorted(runs):
        try:
            summary = (folder / "summary.json").read_bytes()
        except OSError:
            summary = b""
        h.update(name.encode() + b"\0" + hashlib.sha256(summary).digest())
    h.update(json.dumps({"setting": choice.setting, "by_budget": choice.by_budget,
                         "control_by_budget": choice.control_by_budget, "runner_up": choice.runner_up},
                        sort_keys=True).encode())
    return h.hexdigest()


def read_choices(cfg: StudyConfig, layout: Layout, scale: str) -> tuple[Optional[dict[str, Choice]], list[str]]:
    """(what selection.json records for a scale, or None when stage 1 has not chosen yet; the arms whose
    record is not believed). An arm's record is believed only when the runs it names (recorded beside it:
    _basis_file) include this config's tuning runs of the arm and its digest (choice_basis) comes out of
    them as they are on disk now."""
    try:
        saved = json.loads(layout.selection(scale).read_text())
        arms = saved.get("arms", {})
        if not isinstance(arms, dict):
            raise ValueError("arms is not an object")
    except (OSError, ValueError, AttributeError):
        return None, []
    try:
        basis = json.loads(_basis_file(layout, scale).read_text())
        basis = basis if isinstance(basis, dict) else {}
    except (OSError, ValueError):
        basis = {}
    choices, distrusted = {}, []
    for arm, c in arms.items():
        try:
            choice = Choice(dict(c.get("setting", {})), {str(b): dict(v) for b, v in c.get("by_budget", {}).items()},
                            {str(b): dict(v) for b, v in c.get("control_by_budget", {}).items()},
                            dict(c.get("runner_up", {})))
            names = [str(n) for n in basis[arm]["runs"]]
            asked = {r.name for r in _tuning_runs(cfg, layout, scale, arm)}
            trusted = arm in cfg.arms and asked <= set(names) and basis[arm]["digest"] == _digest(
                [(n, layout.root / n) for n in names], choice)
        except (AttributeError, TypeError, ValueError, KeyError, StopIteration):
            trusted = False
        if trusted:
            choices[arm] = choice
        else:
            distrusted.append(arm)
    return choices, distrusted


def _verdict(study: Study, scale: str, runs: list[Run]) -> ladder.ScaleResult:
    """mltrain-compare on the runs this config asks for at this scale (`runs`), as far as they are on disk."""
    cfg, size = study.cfg, study.sizes[scale]
    result = ladder.ScaleResult(scale, size.n_params, size.max_steps, size.tokens_per_param, study.labels[scale],
                                {arm: study.kinds[(scale, arm)] for arm in cfg.arms},
                                axis_value=size.on_axis(cfg.ladder_axis))
    paths = _existing(runs)
    tune = varied_keys(cfg)
    verdict = study.layout.verdict(scale)
    try:
        guarded.refuse_linked([verdict / f"comparison.{s}" for s in ("md", "json", "png")], study.layout.root)
        if not paths:
            raise MltrainError("no run of this scale is on disk")
        result.comparison = _compare(paths, out=verdict, select_seeds=selection_seeds(cfg), tune=tune, plot=True)
    except (MltrainError, OSError) as err:
        result.why_no_verdict = str(err)
        study.shown().say(f"mltrain-study: {scale}: no verdict: {err}")
    return result


def _runner_up_multiplier(study: Study, scale: str, sweeps: list[Sweep], arm: str, choice: Choice) -> Optional[Multiplier]:
    """M of an arm's runner-up setting against the same frontier (mltrain-compare on the frontier's runs and
    the runner-up's alone); None when it cannot be had."""
    cfg = study.cfg
    control = cfg.frontier.control_arm
    frontier = {frontier_arm(cfg), *([control + AT_FRONTIER] if control else []), *([control] if control != arm else [])}
    second = tuple(sorted(choice.runner_up.items()))
    runs = [r for s in sweeps if s.dir.name in frontier for r in s.runs()]
    runs += [r for s in sweeps if s.dir.name in (arm, arm + RUNNER_UP) for r in s.runs()
             if tuple(sorted(r.setting.items())) == second]
    try:
        found = _compare(_existing(runs), out=None, select_seeds=selection_seeds(cfg), tune=varied_keys(cfg), plot=False)
    except (MltrainError, OSError) as err:
        study.shown().say(f"mltrain-study: {scale}/{arm}: no M at the runner-up setting: {err}")
        return None
    entry = ladder.find_arm(found.arms, study.labels[scale][arm], study.kinds[(scale, arm)])
    return entry.multiplier if entry and entry.multiplier else None


def _tuning_record(study: Study, scale: str, budgets: list[str], sweeps: list[Sweep],
                   choices: dict[str, Choice]) -> RungTuning:
    """What each arm tried (the pilots that fixed its grid counted in), its per-setting selection losses, what
    it chose, and M at its runner-up: the ladder.json entry of a rung's tuning."""
    cfg, arms = study.cfg, {}
    control = cfg.frontier.control_arm
    for arm in cfg.arms:
        runs = _arm_runs(study.layout, scale, sweeps, arm)
        ran = len({tuple((k, v) for k, v in sorted(r.setting.items()) if k != BUDGET) for r in runs})
        entry = ArmTuning(cfg.arms[arm].pilots, ran, ran + cfg.arms[arm].pilots,
                          tuple(tuning.settings_table(tuning.losses(runs), selection_seeds(cfg))))
        choice = choices.get(arm)
        if arm == frontier_arm(cfg) and control:
            family = _arm_runs(study.layout, scale, sweeps, control + AT_FRONTIER)
            control_ran = len({tuple((k, v) for k, v in sorted(r.setting.items()) if k not in (BUDGET, COARSE_STEPS))
                               for r in family})
            entry = replace(entry, control_settings_run=control_ran, settings_tried=entry.settings_tried + control_ran,
                            control_selection_losses=tuple(tuning.settings_table(tuning.losses(family),
                                                                                 selection_seeds(cfg))))
        if choice is not None:
            entry = replace(entry, setting=choice.setting, by_budget=choice.by_budget,
                            control_by_budget=choice.control_by_budget)
            if choice.runner_up:
                entry = replace(entry, runner_up=RunnerUp(choice.runner_up,
                                                          _runner_up_multiplier(study, scale, sweeps, arm, choice)))
        arms[arm] = entry
    return RungTuning(tuple(budgets), tuple(selection_seeds(cfg)), arms)


def _missing(study: Study, runs: list[Run]) -> list[str]:
    """Every run of the scale that did not end finished, with why."""
    missing = []
    for run in runs:
        summary = run_status(run.dir)
        if summary is not None and summary.get("status", "finished") == "finished":
            continue
        why = study.failures.get(run.name)
        if why is None:
            why = (f"{summary.get('status')}: {summary.get('status_reason', '')}" if summary
                   else "started, did not finish" if run.dir.exists() else "not run")
        missing.append(f"{run.name}: {why}")
    return missing


def command_line(argv: list[str]) -> str:
    return shlex.join(["mltrain-study", *argv])
