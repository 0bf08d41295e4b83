"""`mltrain-study`: the command line. Hydra composes the study (conf/mltrain_study.yaml, a study from
conf/study/, overrides), schema.check and stages.prepare refuse bad input in one line, then either the
status view or the stages run.

    mltrain-study study=smoke
    mltrain-study study=cpu_ladder seeds=[1,2,3,4] launcher.n_jobs=2
    mltrain-study study=cpu_ladder --status
    mltrain-study study=depth_ladder dir=results/depth_ladder --for 2h30m   # records in git, a time window

Exit status: 0 every run finished and every report was written; 1 some run failed or a scale has no
verdict (the ladder report says what is missing); 2 bad input (one `mltrain-study: error:` line,
before any run; a run already in `dir` made in another environment too); 130 stopped by Ctrl-C, 128 + its
number by a signal handed on to the runs (143 SIGTERM, 129 SIGHUP, 138 SIGUSR1; one line: run the same
command to continue). A study stopped by its time window (--for, --until) exits 0 with one line: what is
done, what is left and the command that continues it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from mltrain.core.errors import ConfigError, composition_line, report, tool_main
from mltrain.tools.study import compose, planned, sanity, schema
from mltrain.tools.study.compose import one_line
from mltrain.tools.study.schema import StudyConfig

PROG = "mltrain-study"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Run a study: tune every arm, evaluate, compare per scale, "
                                "and report whether the saving survives scale.")
    p.add_argument("overrides", nargs="*", help="study=<name> (conf/study/) and overrides of its keys, Hydra syntax")
    p.add_argument("--status", action="store_true", help="print what is done per scale, stage and arm; run nothing")
    p.add_argument("--for", dest="for_", metavar="DURATION", help="a time window from now (2h30m, 90m, 45s): launch "
                   "no run estimated to end after it, stop running ones at a checkpoint when it ends, exit 0")
    p.add_argument("--until", metavar="TIME", help="a time window until HH:MM (local, its next occurrence) or an "
                   "ISO date and time; as --for")
    return p


def compose_study(overrides: Sequence[str]) -> Any:
    """The study config; ConfigError (one line naming the key, the file and the value) when it does not
    compose against the schema or does not resolve."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from mltrain.method import plugins
    from mltrain.runs.keys import override_key
    from mltrain.tools.study.plan import parse

    for o in overrides:
        parse(o)  # a malformed override is named as itself, not as Hydra's grammar message alone
    plugins.load([*plugins.from_env(), *plugins.from_overrides(overrides)])  # what they register, before composing
    schema.register()
    # the study's own search path is its runs' too (their presets may be in it): searchpath=, unless given
    handed = [f"searchpath={o.partition('=')[2]}" for o in overrides
              if override_key(o) == "hydra.searchpath" and not any(override_key(p) == "searchpath" for p in overrides)]
    try:
        with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
            cfg = compose("mltrain_study", overrides=[*overrides, *handed])
        OmegaConf.to_container(cfg, resolve=True)  # every interpolation now: a bad one is a composition error
    except Exception as err:  # noqa: BLE001 - Hydra's, OmegaConf's and YAML's errors: a missing study, a typo
        from hydra.errors import HydraException
        from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

        # Hydra's and OmegaConf's as `mltrain` says them (errors.composition_line): the override at fault
        # first, a misspelt key's nearest key; what no override names (the study file's own) names the
        # file. A YAML error, or an interpolation that does not resolve, keeps its own line and position.
        resolving = isinstance(err, InterpolationResolutionError)
        composing = isinstance(err, (HydraException, OmegaConfBaseException)) and not resolving
        line = composition_line(err, list(overrides)) if composing else one_line(err)
        where = _study_file(overrides)
        from_file = resolving or line.startswith("In 'study/")
        if where is not None and from_file and str(where) not in line:
            line += f" (study file {where})"
        raise ConfigError(line) from None
    return cfg


def _study_file(overrides: Sequence[str]) -> Optional[Path]:
    """The yaml file the `study=<name>` override names: a shipped one, or one on hydra.searchpath."""
    import mltrain.conf
    from mltrain.runs.keys import override_key, override_value
    from mltrain.tools.study.plan import parse

    name = next((override_value(o) for o in reversed(overrides) if override_key(o) == "study"), None)
    if not name:
        return None
    folders = [Path(mltrain.conf.__file__).parent]
    for o in overrides:
        if override_key(o) == "hydra.searchpath":
            entries = parse(o).value()
            folders += [Path(str(e).removeprefix("file://")) for e in (entries if isinstance(entries, list) else [])]
    return next((f / "study" / f"{name}.yaml" for f in folders if (f / "study" / f"{name}.yaml").is_file()), None)


def main(argv: Optional[Sequence[str]] = None, out: Any = None) -> int:
    """The exit status of `mltrain-study <argv>`; the study's own lines go to `out` (None: the console)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return tool_main(PROG, _parser(), lambda args: _run(args, argv, out), argv)


def _run(args: argparse.Namespace, argv: list[str], out: Any) -> int:
    from mltrain.tools.study import stages
    from mltrain.tools.study.window import Window, without_window

    window = Window.from_args(args.for_, args.until)  # opens now; a malformed one is refused first
    composed = compose_study(args.overrides)
    schema.check(composed)
    sanity.check(composed)  # numbers and keys that pass the schema but not common sense
    cfg = compose.typed_study(composed)
    if args.status:
        return _status(cfg, out or sys.stdout)
    try:
        study = stages.prepare(cfg, out)  # bad input: MltrainError, one line before any run
        if window is None:  # a window bounds the time itself
            sanity.check_study_duration(study, out or sys.stdout)  # far longer than this machine can give: said, or refused
    except KeyboardInterrupt:
        report(PROG, "stopped by Ctrl-C before any run started; nothing was written", kind="interrupted")
        return 130
    study.window = window
    return stages.run(study, stages.command_line(without_window(argv) if window else argv))


def _status(cfg: StudyConfig, out: Any) -> int:
    from mltrain.tools.study.plan import Layout
    from mltrain.tools.study.progress import status_lines
    from mltrain.tools.study.stages import read_choices

    layout = Layout(Path(cfg.dir).resolve(), _steps(cfg))
    _check_study_folder(cfg, layout.root)
    read = {scale: read_choices(cfg, layout, scale) for scale in cfg.ladder}
    choices = {scale: found for scale, (found, _) in read.items()}
    distrusted = {scale: arms for scale, (_, arms) in read.items()}
    view = status_lines(cfg, layout, choices, distrusted)
    print("\n".join(view.lines), file=out, flush=True)
    if view.complete:  # what it took, not a plan
        print(planned.took_line(cfg.name, layout.root), file=out, flush=True)
    else:  # every run it can still add
        print("\n".join(sanity.status_cost_lines(cfg, layout.root)), file=out, flush=True)
    return 0


def _steps(cfg: StudyConfig) -> dict[str, int]:
    """Each rung's steps where the folders depend on them (the frontier's warm-up lengths), else none: the
    parameter count needs the model built (on the meta device)."""
    if not cfg.frontier.warmup_fractions:
        return {}
    from mltrain.tools.study import compose

    with compose.Composer() as composer:
        return {name: size.max_steps for name, size in compose.ladder_sizes(cfg, composer).items()}


def _check_study_folder(cfg: StudyConfig, root: Path) -> None:
    """ConfigError unless `root` is this study's folder (its study.json names it, or it holds a scale's
    folder of the study) or does not exist yet (a study not started): a file, an empty folder or another
    study's is not shown as a fresh study."""
    import json

    if not root.exists() and not root.is_symlink():
        return
    if not root.is_dir():
        raise ConfigError(f"--status: dir={root} is not a folder, so not a study's folder; give the folder the "
                          "study writes (dir=...)")
    try:
        recorded = json.loads((root / "study.json").read_text())
    except FileNotFoundError:
        if any((root / str(scale)).is_dir() for scale in cfg.ladder):
            return  # its runs are there (a study.json lost or never written): shown as what they are
        raise ConfigError(f"--status: {root} holds no study.json and no scale's folder of study {cfg.name}, so it "
                          "is not its folder; give the folder the study writes (dir=...)") from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"--status: {root / 'study.json'} cannot be read ({err}), so {root} is not shown "
                          "as a study") from None
    name = recorded.get("name") if isinstance(recorded, dict) else None
    if name != cfg.name:
        raise ConfigError(f"--status: {root} is the folder of study {name!r}, not of {cfg.name!r}: give that "
                          "study (study=...) or this study's folder (dir=...)")


def study_main() -> None:
    sys.exit(main())
