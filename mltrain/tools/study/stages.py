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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TextIO

from omegaconf import OmegaConf

from mltrain.errors import ConfigError, MltrainError
from mltrain import guarded
from mltrain.runs import rundir
from mltrain.runs.provenance import redact_tree
from mltrain.tools.study import compose, ladder
from mltrain.tools.study.launch import STOPPED, Interrupts, multirun, output_to
from mltrain.tools.study.plan import (EVAL, TUNE, Choice, Layout, Run, Sweep, evaluation_run_count, evaluation_sweeps,
                                      possible_evaluation_runs, setting_text, tuning_sweeps)
from mltrain.tools.study.compose import setting_key
from mltrain.tools.study.progress import Progress, Watcher, ended, failure_reason, run_status
from mltrain.tools.study.sanity import run_cost
from mltrain.tools.study.schema import BUDGET, eval_seeds, frontier_arm, tuned_keys, varied_keys


@dataclass
class Study:
    """A checked study and what this invocation has done so far."""

    cfg: Any
    layout: Layout
    sizes: dict[str, compose.ScaleSize]
    kinds: dict[tuple[str, str], str]
    labels: dict[str, dict[str, str]]
    out: Optional[TextIO]  # where the study's own lines go; None: the console
    progress: Optional[Progress] = None
    launched: int = 0  # sweeps launched by this invocation
    failures: dict[str, str] = field(default_factory=dict)  # run name -> why it did not end
    interrupts: "Interrupts" = field(default_factory=lambda: Interrupts())
    configs: dict[tuple, Any] = field(default_factory=dict)  # (scale, arm, setting) -> its composed run config

    costs: dict[tuple, float] = field(default_factory=dict)  # (scale, arm, setting) -> its planned FLOPs

    def cost(self, run: Run) -> float:
        """A run's planned FLOPs, every phase of its plan (mltrain/method/cost.py)."""
        return self.setting_cost(run.sweep.scale, run.sweep.arm, run.setting)

    def setting_cost(self, scale: str, arm: str, setting: dict[str, str]) -> float:
        """The planned FLOPs of a run of `setting`: its composed config's; a setting no tuning run has (an
        evaluation budget off the grid) costs the arm's first setting times its budget."""
        key = (scale, *setting_key(arm, setting))
        if key not in self.costs:
            cfg = self.configs.get(key)
            if cfg is not None:
                self.costs[key] = run_cost(cfg)[0]
            else:
                near, first = next((k, c) for k, c in self.configs.items() if k[:2] == (scale, arm))
                ratio = float(setting.get(BUDGET, 1.0)) / float(dict(near[2]).get(BUDGET, 1.0))
                self.costs[key] = run_cost(first)[0] * ratio
        return self.costs[key]


def prepare(cfg: Any, out: Optional[TextIO] = None) -> Study:
    """Every check, before any run starts: ConfigError (one line) for the first problem."""
    layout = Layout(Path(cfg.dir).resolve())
    compose.check_seeds(cfg)
    with compose.Composer() as composer:
        sizes = compose.ladder_sizes(cfg, composer)
        tuning = [s for scale in cfg.ladder for s in tuning_sweeps(cfg, layout, scale, sizes[scale].max_steps)]
        configs = compose.check_settings(cfg, tuning, sizes, composer)
    kinds = compose.arm_kinds(configs)
    frontier = frontier_arm(cfg)
    if any(kind != "single" for (_, arm), kind in kinds.items() if arm == frontier):
        raise ConfigError(f"arm {frontier} sweeps {BUDGET}, the frontier's axis, but its runs are not single-level "
                          f"(experiment={cfg.arms[frontier].experiment}): only the single-level arm makes the frontier")
    labels = compose.check_labels(cfg, sizes, kinds)
    earlier = [r for s in tuning for r in s.runs()]
    earlier += [r for scale in cfg.ladder for r in possible_evaluation_runs(cfg, layout, scale) if r.dir.exists()]
    compose.check_earlier_runs(earlier, configs)
    guarded.refuse_linked(_owned_paths(cfg, layout), layout.root)  # no write of the study through a link
    return Study(cfg, layout, sizes, kinds, labels, out, configs=configs)


def _owned_paths(cfg: Any, layout: Layout) -> list[Path]:
    """Every file and folder the study writes itself or has its runs write (each must not be a link)."""
    paths = [layout.log, layout.root / "study.json", *(layout.ladder.with_suffix(s) for s in (".md", ".json", ".png"))]
    for scale in cfg.ladder:
        paths += [layout.selection(scale), _basis_file(layout, scale)]
        paths += [layout.verdict(scale) / f"comparison.{s}" for s in ("md", "json", "png")]
        paths += [r.dir for s in tuning_sweeps(cfg, layout, scale) for r in s.runs()]
        paths += [r.dir for r in possible_evaluation_runs(cfg, layout, scale)]
    return paths


def run(study: Study, command: str) -> int:
    """Run every stage; 0 when every run ended finished and every scale has its verdict, 1 otherwise,
    130 after Ctrl-C (one line says how to continue)."""
    cfg, layout = study.cfg, study.layout
    try:
        # One study per folder at a time; what the sweeps print goes to study.log, the study's lines here.
        with rundir.claim(layout.root, what="dir", earlier=lambda _: None), output_to(layout.log) as console, \
                study.interrupts:
            record = redact_tree(OmegaConf.to_container(cfg, resolve=True))  # secrets as run.json keeps them out
            guarded.write_json(layout.root / "study.json", record, root=layout.root, indent=2)
            study.progress = _progress(study, study.out or console)
            results = [_scale(study, scale) for scale in cfg.ladder]
            report = ladder.ladder_report(cfg.name, list(cfg.arms), frontier_arm(cfg), results, list(cfg.predict_params),
                                          cfg.ladder_axis)
            ladder.write_ladder(report, layout.ladder, root=layout.root)
    except KeyboardInterrupt:
        print(f"mltrain-study: stopped; every finished run is kept and interrupted ones resume: continue with "
              f"the same command: {command}", file=study.out or sys.stdout, flush=True)
        return 130
    out = study.out or sys.stdout
    for trend in report["trends"]:
        print(trend["sentence"], file=out)
    incomplete = sum(len(s["missing_runs"]) for s in report["scales"])
    no_verdict = [s["scale"] for s in report["scales"] if s["why_no_verdict"]]
    print(f"mltrain-study: ladder report {layout.ladder.with_suffix('.md')}; {study.launched} sweep(s) launched"
          + (f"; {incomplete} run(s) did not finish" if incomplete else "")
          + (f"; no verdict at {', '.join(no_verdict)}" if no_verdict else ""), file=out, flush=True)
    return 1 if incomplete or no_verdict else 0


def _progress(study: Study, out: TextIO) -> Progress:
    """The runs to count and their planned FLOPs; the finished ones' summaries give the first rate."""
    cfg, total, done, cost_left = study.cfg, 0, 0, 0.0
    progress = Progress(out, 0, 0, 0.0, _parallel(cfg))
    for scale in cfg.ladder:
        runs = [r for s in tuning_sweeps(cfg, study.layout, scale, study.sizes[scale].max_steps) for r in s.runs()]
        cost_left += _evaluation_cost(study, scale)
        ended_eval = _ended_evaluation(study, scale, read_choices(cfg, study.layout, scale)[0])
        done += len(ended_eval)
        cost_left -= sum(study.cost(r) for r in ended_eval)
        total += len(runs) + evaluation_run_count(cfg, scale)
        for r in ended_eval:
            progress.measure(run_status(r.dir) or {})
        for r in runs:
            summary = run_status(r.dir)
            if ended(summary):
                done += 1
                progress.measure(summary)
            else:
                cost_left += study.cost(r)
    progress.total, progress.done, progress.cost_left = total, done, cost_left
    return progress


def _evaluation_cost(study: Study, scale: str) -> float:
    """Planned FLOPs of a scale's evaluation runs before stage 1 chooses: per arm and budget, the mean
    of its tuning settings' costs on every evaluation seed."""
    cfg, seeds, flops = study.cfg, len(eval_seeds(study.cfg, scale)), 0.0
    for arm in cfg.arms:
        by_budget: dict[float, list[float]] = {}
        for (s, a, setting), _ in study.configs.items():
            if (s, a) == (scale, arm):
                by_budget.setdefault(float(dict(setting).get(BUDGET, 1.0)), []).append(
                    study.setting_cost(scale, arm, dict(setting)))
        flops += seeds * sum(sum(c) / len(c) for c in by_budget.values())
    return flops


def _parallel(cfg: Any) -> int:
    """Runs that train at once: the local launcher's jobs (the basic launcher runs one at a time)."""
    return max(1, cfg.launcher.n_jobs or 1) if cfg.launcher.name == "local" else 1


def _scale(study: Study, scale: str) -> ladder.ScaleResult:
    cfg, size = study.cfg, study.sizes[scale]
    tuning = tuning_sweeps(cfg, study.layout, scale, size.max_steps)
    _say_left_out(study, scale)
    for sweep in tuning:
        _launch(study, sweep)
    counted = _ended_evaluation(study, scale, read_choices(cfg, study.layout, scale)[0])
    choices = _choose(study, scale)
    _recount(study, counted, _ended_evaluation(study, scale, choices))
    evaluation = evaluation_sweeps(cfg, study.layout, scale, choices, size.max_steps)
    for sweep in evaluation:
        _launch(study, sweep)
    result = _verdict(study, scale, [r for s in (*tuning, *evaluation) for r in s.runs()])
    result.missing = _missing(study, [r for s in (*tuning, *evaluation) for r in s.runs()])
    result.missing += [f"{scale}/{arm}: stage 1 chose no setting, so it was not evaluated"
                       for arm in cfg.arms if arm not in choices]
    return result


def _say_left_out(study: Study, scale: str) -> None:
    """One line naming the run folders of the scale that this config does not ask for (its grid, arms or
    seeds changed since they ran): they stay on disk, and neither the choice nor the verdict reads them."""
    cfg, layout = study.cfg, study.layout
    asked = {r.dir for s in tuning_sweeps(cfg, layout, scale) for r in s.runs()}
    asked |= {r.dir for r in possible_evaluation_runs(cfg, layout, scale)}
    found = [d for stage in (TUNE, EVAL) for d in sorted(layout.scale(scale).glob(f"{stage}/*/*"))
             if d.is_dir() and not d.is_symlink() and (d / "metrics.jsonl").exists() and d not in asked]
    if found:
        shown = ", ".join(str(d.relative_to(layout.scale(scale))) for d in found[:3]) + (", ..." if len(found) > 3 else "")
        study.progress.say(f"mltrain-study: {scale}: {len(found)} run folder(s) on disk are not asked for by this "
                           f"config (its grid, arms or seeds changed since): left out of the choice and the "
                           f"verdict ({shown})")


def _existing(runs: list[Run]) -> list[Path]:
    """The folders of these runs that exist (the runs the config asks for, as far as they have run)."""
    return [r.dir for r in runs if r.dir.is_dir()]


def _ended_evaluation(study: Study, scale: str, choices: Optional[dict[str, Choice]]) -> list[Run]:
    """The evaluation runs of these choices that have ended (none before stage 1 has chosen)."""
    sweeps = evaluation_sweeps(study.cfg, study.layout, scale, choices) if choices else []
    return [r for s in sweeps for r in s.runs() if ended(run_status(r.dir))]


def _recount(study: Study, counted: list[Run], now: list[Run]) -> None:
    """The progress counted as done the evaluation runs of the choice it found at start; when stage 1
    chooses again (new tuning runs), those of the new choice are the ones done."""
    if study.progress is not None:
        study.progress.recount(len(now) - len(counted), sum(map(study.cost, now)) - sum(map(study.cost, counted)))


def _launch(study: Study, sweep: Sweep) -> None:
    """Launch the sweep unless every run of it has ended; report each run that ends or fails."""
    pending = [r for r in sweep.runs() if not ended(run_status(r.dir))]
    if not pending:
        return
    log = study.layout.log
    offset = log.stat().st_size

    def on_end(run: Run, summary: dict) -> None:
        if summary.get("status") != "finished":
            study.failures[run.name] = f"{summary.get('status')}: {summary.get('status_reason', '')}"
        study.progress.ended(run, summary, study.cost(run))

    with Watcher(pending, on_end) as watcher:
        code = multirun(sweep.overrides(study.cfg, study.sizes[sweep.scale].tags), dict(study.cfg.launcher.env))
        study.launched += 1
    if code in STOPPED or study.interrupts.requested:
        raise KeyboardInterrupt
    with open(log, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", errors="replace")
    for run in watcher.pending:
        why = failure_reason(run, text)
        study.failures[run.name] = why
        study.progress.settle(run, study.cost(run), f"FAILED: {why}")


# ---------------------------------------------------------------------------------------------
# mltrain-compare: the choice of stage 1 and the verdict of stage 3


def _compare(paths: list[Path], **kwargs: Any) -> dict:
    try:
        from mltrain.tools.compare import compare_dirs
    except ImportError as err:  # an mltrain-compare without the tuned verdict
        raise MltrainError(f"mltrain-compare cannot choose or judge here ({err})") from None
    return compare_dirs([str(p) for p in paths], **kwargs)


def _on_grid(arm: Any, key: str, value: Any) -> str:
    """The grid's own text for a value compare chose (compare reads values back from the runs)."""
    grid = [setting_text(key, v) for v in arm.grid[key]]
    text = setting_text(key, value)
    for g in grid:
        if g == text or _same_number(g, text):
            return g
    raise ConfigError(f"mltrain-compare chose {key}={value}, which is not in the grid {grid}")


def _same_number(a: str, b: str) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    except ValueError:
        return False


def _choose(study: Study, scale: str) -> dict[str, Choice]:
    """Stage 1's choice per arm, by mltrain-compare on the arm's tuning runs; written to selection.json."""
    cfg, choices, basis = study.cfg, {}, {}
    for name, arm in cfg.arms.items():
        keys = tuned_keys(arm)
        runs = _tuning_runs(cfg, study.layout, scale, name)
        try:
            if not _existing(runs):
                raise MltrainError("none of its tuning runs is on disk")
            found = _compare(_existing(runs), out=None, select_seeds=list(cfg.selection_seeds), tune=keys, plot=False)
            kind = study.kinds[(scale, name)]
            label = compose.arm_label(cfg, scale, name, study.sizes[scale].max_steps, kind, keys)
            arms = found.get("arms", [])
            entry = arms[0] if len(arms) == 1 else ladder.find_arm(arms, label, kind)
            if entry is None:
                raise ConfigError(f"no arm labelled {label!r} among {[a.get('label') for a in arms]}")
            by_budget = {_on_grid(arm, BUDGET, b): {k: _on_grid(arm, k, v) for k, v in s.items() if k in keys}
                         for b, s in (entry.get("selected_by_budget") or {}).items()} if BUDGET in arm.grid else {}
            setting = {k: _on_grid(arm, k, v) for k, v in (entry.get("selected") or {}).items() if k in keys}
        except (MltrainError, OSError) as err:
            study.progress.say(f"mltrain-study: {scale}/{name}: stage 1 chose nothing: {err}")
            continue
        if setting or by_budget:
            choices[name] = Choice(setting, by_budget)
            basis[name] = choice_basis(runs, choices[name])
    guarded.write_json(study.layout.selection(scale), {
        "scale": scale, "selection_seeds": list(cfg.selection_seeds),
        "arms": {a: {"setting": c.setting, "by_budget": c.by_budget} for a, c in choices.items()}},
        root=study.layout.root, indent=2)
    guarded.write_json(_basis_file(study.layout, scale), basis, root=study.layout.root, indent=2)
    return choices


def _basis_file(layout: Layout, scale: str) -> Path:
    """Beside selection.json: each arm's choice_basis, what its record there must come out of to be believed."""
    return layout.selection(scale).with_name(".selection.basis.json")


def _tuning_runs(cfg: Any, layout: Layout, scale: str, arm: str) -> list[Run]:
    return next(s for s in tuning_sweeps(cfg, layout, scale) if s.arm == arm).runs()


def choice_basis(runs: list[Run], choice: Choice) -> str:
    """What a choice was made from and what it is, as one digest: each tuning run's folder and its
    summary.json, and the chosen setting. It is kept beside selection.json; a record whose digest does not
    come out of the runs the config asks for now (edited by hand, or its runs or grid changed) is not
    believed."""
    h = hashlib.sha256()
    for run in sorted(runs, key=lambda r: r.name):
        try:
            summary = (run.dir / "summary.json").read_bytes()
        except OSError:
            summary = b""
        h.update(run.name.encode() + b"\0" + hashlib.sha256(summary).digest())
    h.update(json.dumps({"setting": choice.setting, "by_budget": choice.by_budget}, sort_keys=True).encode())
    return h.hexdigest()


def read_choices(cfg: Any, layout: Layout, scale: str) -> tuple[Optional[dict[str, Choice]], list[str]]:
    """(what selection.json records for a scale, or None when stage 1 has not chosen yet; the arms whose
    record is not believed). An arm's record is believed only when its digest (choice_basis) comes out
    of this config's tuning runs of the arm as they are on disk now (recorded beside it: _basis_file)."""
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
            choice = Choice(dict(c.get("setting", {})), {str(b): dict(v) for b, v in c.get("by_budget", {}).items()})
            trusted = arm in cfg.arms and basis.get(arm) == choice_basis(_tuning_runs(cfg, layout, scale, arm), choice)
        except (AttributeError, TypeError, ValueError):
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
        result.comparison = _compare(paths, out=verdict, select_seeds=list(cfg.selection_seeds), tune=tune, plot=True)
    except (MltrainError, OSError) as err:
        result.why_no_verdict = str(err)
        study.progress.say(f"mltrain-study: {scale}: no verdict: {err}")
    return result


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
