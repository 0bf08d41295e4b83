"""A study's numbers and keys checked for common sense, before the study claims its folder or starts a
run (the schema's types and schema.check's rules come first; these are separate checks).

* `check(study)`: tokens per parameter finite and at most MAX_TOKENS_PER_PARAM, predicted sizes finite,
  `launcher.env` values a process can use (runs/sanity.py), `launcher.n_jobs` at most the CPUs here for
  the local launcher, and no `hydra.*` key where the study puts run settings (an arm's grid, the
  override lists): the study sets Hydra's keys itself (every run's folder, the launcher), and a run
  whose folder moved would be reported as failed although it finished; the launcher Hydra has, with
  every key the study sets on it (`check_launcher`).
* `check_held_out(study)`: every arm's runs evaluated on the frontier's held-out set, from the composed
  run configs (the keys that define it, `held_out_keys`: data.*, model.block_size, train.eval_* but
  the interval, and train.batch_size while the held-out set is counted in batches). An arm whose fixed
  overrides, grid or preset change one would train whole and then be left out of the verdict as other data.
* `check_study_duration(study, out)`: the study's planned cost (planned.py: every run it can add, as a
  range, at a measured rate): said first when it is long, refused without `allow_long=true` when its
  "at most" would take more than a day. Only for launchers that run here (basic, local).
* `repeated_data(study)`: after the runs, one warning line when any run the study asks for trained on more
  than one epoch of its training split (summary.json's `epochs`), else None.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Protocol, TextIO

from mltrain.core.errors import ConfigError, MltrainError
from mltrain.runs import sanity
from mltrain.runs.files import read_summary
from mltrain.runs.keys import override_key, override_value
from mltrain.runs.sweep import THREADS_LINE, threaded
from mltrain.tools.study import planned
from mltrain.tools.study.plan import Layout, possible_evaluation_runs, tuning_sweeps
from mltrain.tools.study.planned import Rate
from mltrain.tools.study.schema import BUDGET, StudyConfig

if TYPE_CHECKING:  # the training stack is imported when a run config is made, not with this module
    from mltrain.config import Config


class Prepared(Protocol):
    """What these checks read of a prepared study (stages.Study): its config, its folders and every
    setting's typed run config, keyed (scale, arm, setting)."""

    cfg: StudyConfig
    layout: Layout
    configs: dict[tuple, Config]


MAX_TOKENS_PER_PARAM = 1e5  # 5,000 times the compute-optimal 20: beyond it a value is a typo, not a plan
MAX_PARAMS = 1e15
LOCAL_LAUNCHERS = ("basic", "local")
_HYDRA_ADVICE = ("the study sets Hydra's keys itself (each run's folder, the sweep, the launcher): choose the "
                 "launcher with launcher.name, launcher.n_jobs and launcher.overrides, the runs' environment "
                 "with launcher.env")


def _is_hydra(key: str) -> bool:
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


def check(study: StudyConfig) -> None:
    """ConfigError (one line naming the key and its value) for the first number or key of the study
    that cannot be meant; touches no file."""
    why = f" (tokens per parameter; at most {MAX_TOKENS_PER_PARAM:g})"
    if study.tokens_per_param is not None:
        sanity.finite_number("tokens_per_param", study.tokens_per_param, 0, MAX_TOKENS_PER_PARAM, why=why)
    for name, scale in study.ladder.items():
        if scale.tokens_per_param is not None:
            sanity.finite_number(f"ladder.{name}.tokens_per_param", scale.tokens_per_param, 0, MAX_TOKENS_PER_PARAM,
                                 why=why)
    for i, p in enumerate(study.predict_params):
        sanity.finite_number(f"predict_params[{i}]", p, 0, MAX_PARAMS, why=" (a number of parameters)")
    sanity.check_env(dict(study.launcher.env), "launcher.env")
    _check_jobs(study)
    for where, overrides in _override_lists(study):
        for o in overrides:
            key = override_key(o)
            if _is_hydra(key):
                raise ConfigError(f"{where}: {o!r} sets a Hydra key: {_HYDRA_ADVICE}")
    for name, arm in study.arms.items():
        for key in arm.grid:
            if _is_hydra(str(key)):
                raise ConfigError(f"arms.{name}.grid: {key} is a Hydra key, not a run setting to tune: {_HYDRA_ADVICE}")
    for o in study.launcher.overrides:
        if not override_key(o).startswith("hydra.launcher."):
            raise ConfigError(f"launcher.overrides: {o!r} is not a hydra.launcher.* setting (put run settings in "
                              "common or an arm's overrides)")
    set_keys = {override_key(o).removeprefix("hydra.launcher."): override_value(o) for o in study.launcher.overrides}
    if study.launcher.name == "local" and (what := threaded(set_keys)):
        raise ConfigError(f"launcher.overrides: {THREADS_LINE.format(what=what)}")
    check_launcher(study)


def check_launcher(study: StudyConfig) -> None:
    """ConfigError (one line) unless Hydra has the launcher launcher.name names and takes every key the
    study gives it (launcher.n_jobs, launcher.overrides), composed as the sweeps will be: before the
    study claims its folder, not as every run failing after."""
    from hydra.core.global_hydra import GlobalHydra

    from mltrain.tools.study.compose import Composer
    from mltrain.tools.study.plan import launcher_overrides

    with Composer() as composer:
        options = GlobalHydra.instance().config_loader().get_group_options("hydra/launcher")
        name = str(study.launcher.name)
        if name not in options:
            raise ConfigError(f"launcher.name={name!r} is not a Hydra launcher here (hydra/launcher: "
                              f"{', '.join(options)}); nothing was started")
        composer.compose(launcher_overrides(study.launcher), "launcher")


def _override_lists(study: StudyConfig) -> Iterable[tuple[str, list]]:
    yield "common", list(study.common)
    yield "extra", list(study.extra)
    for name, arm in study.arms.items():
        yield f"arms.{name}.overrides", list(arm.overrides)
    for name, scale in study.ladder.items():
        yield f"ladder.{name}.overrides", list(scale.overrides)


def _check_jobs(study: StudyConfig) -> None:
    from mltrain.runs.sweep import available_cpus

    n, cpus = study.launcher.n_jobs, available_cpus()
    if n is not None and study.launcher.name == "local" and n > cpus:
        raise ConfigError(f"launcher.n_jobs={n} is more than the {cpus} CPUs here: every job is a process that "
                          f"trains, so at most {cpus} run at once; nothing was started")


# ---------------------------------------------------------------------------------------------
# One held-out set

# Keys of a run config's data that say where or whether its tokens are made, not which they are.
_DATA_PLACE = ("cache_dir", "prepare_if_missing")


def held_out_keys(cfg: Config) -> dict[str, Any]:
    """The values of the typed run config `cfg` that define its held-out set (the sequences its
    validation loss is measured on, summary.json's held_out fingerprint): the data (data.*, but where its
    cache lives), the context (model.block_size), how much is evaluated (train.eval_* but eval_interval)
    and, while that is counted in batches (train.eval_batches), the batch size."""
    out = {f"data.{f.name}": getattr(cfg.data, f.name) for f in dataclasses.fields(cfg.data)
           if f.name not in _DATA_PLACE}
    out["model.block_size"] = cfg.model.block_size
    train = {f.name for f in dataclasses.fields(cfg.train)}
    out.update({f"train.{n}": getattr(cfg.train, n) for n in sorted(train) if n.startswith("eval_") and n != "eval_interval"})
    if "eval_batches" in train:
        out["train.batch_size"] = cfg.train.batch_size
    return {k: (v.value if hasattr(v, "value") else v) for k, v in out.items()}


def check_held_out(study: Prepared) -> None:
    """ConfigError (one line) when, at some rung, a run of any arm would be evaluated on another held-out
    set than the frontier's: mltrain-compare compares runs on one held-out set only, so that arm's runs
    would all train and then be left out of the verdict. `study`: stages.prepare's (every setting's typed
    run config in `configs`, keyed (scale, arm, setting))."""
    from mltrain.tools.study.schema import frontier_arm

    frontier = frontier_arm(study.cfg)
    reference: dict[str, tuple[tuple, dict]] = {}
    for (scale, arm, setting), cfg in study.configs.items():
        if arm == frontier:
            reference.setdefault(scale, (setting, held_out_keys(cfg)))
    for (scale, arm, setting), cfg in study.configs.items():
        if scale not in reference:
            continue
        ref_setting, ref = reference[scale]
        mine = held_out_keys(cfg)
        differ = [k for k in ref.keys() | mine.keys() if ref.get(k) != mine.get(k)]
        if differ:
            key = sorted(differ)[0]
            where = f"arm {arm}" + (f" ({_setting_text(setting)})" if setting != ref_setting and arm == frontier else "")
            raise ConfigError(
                f"scale {scale}: {where} evaluates on another held-out set than the frontier (arm {frontier}): "
                f"{key}={mine.get(key)!r}, the frontier's is {ref.get(key)!r}"
                + (f" (and {len(differ) - 1} more key(s))" if len(differ) > 1 else "")
                + "; mltrain-compare compares runs on one held-out set, so every run of it would be left out of "
                  "the verdict: set the held-out keys (data.*, model.block_size, train.eval_*) alike for every "
                  "arm, in common or a rung's overrides; nothing was run")


def _setting_text(setting: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting) or "its setting"


# ---------------------------------------------------------------------------------------------
# How long


def run_cost(cfg: Config) -> tuple[float, int]:
    """(planned FLOPs, optimizer steps) of one run of the typed run config `cfg`: every phase of its plan
    (mltrain/method/cost.py)."""
    from mltrain.data.tokenizers import get_tokenizer
    from mltrain.method.cost import plan_cost

    try:
        vocab = cfg.model.vocab_size or get_tokenizer(cfg.data.tokenizer).n_vocab
    except MltrainError:  # the runs themselves say why the tokenizer cannot load; without the head, still a bound
        vocab = 0
    if vocab and cfg.model.vocab_size is None:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=vocab))
    cost = plan_cost(cfg, vocab)
    return cost.total, cost.steps


def unit_costs(configs: dict[tuple, Config]) -> Callable[[str, str], float]:
    """unit(scale, arm): the planned FLOPs of one run of the arm at budget 1, the mean over its composed
    settings (each divided by its budget); the scale's mean for an arm none was composed for."""
    per: dict[tuple[str, str], list[float]] = {}
    for (scale, arm, setting), cfg in configs.items():
        per.setdefault((scale, arm), []).append(run_cost(cfg)[0] / float(dict(setting).get(BUDGET, 1.0)))
    means = {k: sum(v) / len(v) for k, v in per.items()}

    def unit(scale: str, arm: str) -> float:
        if (scale, arm) in means:
            return means[(scale, arm)]
        same = [m for (s, _), m in means.items() if s == scale]
        return sum(same) / len(same) if same else 0.0
    return unit


def composed_units(study: StudyConfig, layout: Layout, sizes: dict) -> Callable[[str, str], float]:
    """unit(scale, arm) from one composed run config per scale and arm (its first tuning run's, divided by its
    budget): what `--status` plans with, without composing every setting."""
    from mltrain.config import validate_composed
    from mltrain.tools.study.compose import Composer

    units: dict[tuple[str, str], float] = {}
    with Composer() as composer:
        for scale in study.ladder:
            for sweep in tuning_sweeps(study, layout, scale, sizes[scale].max_steps):
                run = sweep.runs()[0]
                cfg = validate_composed(composer.compose(sweep.job_overrides(run, study, sizes[scale].tags),
                                                         f"scale {scale}, arm {sweep.arm}"))
                units[(scale, sweep.arm)] = run_cost(cfg)[0] / float(run.setting.get(BUDGET, 1.0))
    return lambda scale, arm: units.get((scale, arm), 0.0)


def status_cost_lines(study: StudyConfig, root: Any) -> list[str]:
    """`--status`'s planned cost (planned.py): every run the study can add, as a range, at the measured rate."""
    from mltrain.tools.study.compose import Composer, ladder_sizes

    with Composer() as composer:
        sizes = ladder_sizes(study, composer)
    layout = Layout(root, {name: size.max_steps for name, size in sizes.items()})
    cost = planned.plan(study, composed_units(study, layout, sizes))
    return planned.status_lines(study.name, cost, planned.study_rate(study, root))


def _nominal(study: StudyConfig, cfg: Config) -> Optional[Rate]:
    """The nominal rate where the runs are not on a CPU (the measured default is a CPU's); None on a CPU."""
    import torch

    from mltrain.training.devices import peak_flops

    device = str(cfg.device)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return None
    jobs = max(1, study.launcher.n_jobs or 1) if study.launcher.name == "local" else 1
    gpus = max(1, min(jobs, torch.cuda.device_count() or 1))
    return Rate(1 / sanity.rate("cuda", peak=peak_flops(torch.device("cuda"))), gpus, "nominal GPU peak, no run here yet")


def check_study_duration(study: Prepared, out: TextIO) -> None:
    """Say what a long study costs here (planned.py: every run it can add, at a measured rate); refuse one
    whose "at most" exceeds a day without consent. `study`: stages.prepare's, whose `configs` are every
    setting's typed run config."""
    cfg, configs = study.cfg, study.configs
    if cfg.launcher.name not in LOCAL_LAUNCHERS or not configs:
        return
    cost = planned.plan(cfg, unit_costs(configs))
    rate = planned.finished_rate(study.layout.root)
    speed = planned.study_rate(cfg, study.layout.root) if rate else (
        _nominal(cfg, next(iter(configs.values()))) or planned.study_rate(cfg, study.layout.root))
    line = planned.summary_line(cfg.name, cost, speed)
    seconds = speed.hours(cost.most.flops, cost.most.runs) * 3600
    if seconds > sanity.LONG_S and not cfg.allow_long:
        raise ConfigError(f"{line}: more than this machine should be given without asking: add allow_long=true to "
                          "start it anyway, or make it smaller; nothing was started")
    if seconds > sanity.NOTE_S:
        print(f"mltrain-study: {line}", file=out, flush=True)


def repeated_data(study: StudyConfig, layout: Layout) -> Optional[str]:
    """One warning line when any run of the study (its tuning runs and the evaluation runs it may launch,
    as far as they have a summary) saw its training data more than once, else None."""
    runs = [r for scale in study.ladder
            for r in [*(r for s in tuning_sweeps(study, layout, scale) for r in s.runs()),
                      *possible_evaluation_runs(study, layout, scale)]]  # fmt: skip
    epochs = [(read_summary(r.dir) or {}).get("epochs") for r in runs]
    over = [e for e in epochs if isinstance(e, (int, float)) and e > 1]
    if not over:
        return None
    return (f"warning: {len(over)} run(s) of {study.name} saw their training data more than once (up to "
            f"{max(over):.2f} epochs); use a larger corpus (data=prose, or your own: data=text data.path=...)")
