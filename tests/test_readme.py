"""Every command in the README is exercised: the install+run and test commands by .ci/run, the rest here.

Training and preparation commands are composed with Hydra and validated exactly as `mltrain` would at
start-up (a sweep line with its first value of each swept key); `mltrain-compare` runs for real on two
short runs made here.
"""

import json
import re
import shlex
from pathlib import Path

import pytest
from conftest import ML, compose_config
from hydra import compose, initialize_config_module

from mltrain.compare import main as compare_main
from mltrain.config import validate
from mltrain.data import prepare as _prepare  # noqa: F401  (registers prepare_schema)
from mltrain.run import run

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands(program: str) -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    return shell_commands("\n".join(blocks), program)


def shell_commands(text: str, program: str) -> list[list[str]]:
    """The arguments of each call of `program` in shell text (continuations joined, comments and the
    scripts' $out variable left out)."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.split("#")[0].strip() if line.lstrip().startswith("#") else line.split("  #")[0].strip()
        for part in line.split("&&"):
            words = shlex.split(part.replace("$out", "out"))
            if words and Path(words[0]).name == program:
                commands.append(words[1:])
    return commands


def first_values(args: list[str]) -> list[str]:
    """A multirun line's overrides with only the first value of each sweep (a,b,c -> a)."""
    out = []
    for arg in args:
        if arg == "-m":
            continue
        key, _, value = arg.partition("=")
        if "," in value and not value.startswith("["):
            value = value.split(",")[0]
        out.append(f"{key}={value}")
    return out


def test_readme_has_the_two_commands_and_ci_runs_them():
    text = README.read_text()
    install = 'python3 -m venv .venv && .venv/bin/pip install -e ".[dev]" && .venv/bin/mltrain coarsening=evenodd'
    test = ".venv/bin/python -m pytest -q"
    assert install in text and test in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert install in ci and test in ci


EVIDENCE = (README.parent / "scripts" / "cpu_evidence.sh").read_text()
TRAIN_COMMANDS = readme_commands("mltrain") + shell_commands(EVIDENCE, "mltrain")


@pytest.mark.parametrize("args", TRAIN_COMMANDS, ids=[" ".join(a) or "mltrain" for a in TRAIN_COMMANDS])
def test_readme_training_commands_compose_and_validate(args):
    overrides = first_values(args)
    cfg = compose_config(*overrides, tiny=False, hydra=True)
    validate(cfg)
    if any(o.startswith("hydra/launcher=") for o in overrides):
        assert cfg.hydra.launcher._target_.startswith("hydra_plugins.")


def test_readme_has_sweep_and_launcher_examples():
    joined = [" ".join(a) for a in TRAIN_COMMANDS]
    assert any(a.startswith("-m") and "multilevel.delta=0.1,0.25,0.5" in a for a in joined)
    assert any("hydra/launcher=local" in a for a in joined) and any("hydra/launcher=slurm" in a for a in joined)


PREPARE_COMMANDS = readme_commands("mltrain-prepare")


@pytest.mark.parametrize("args", PREPARE_COMMANDS, ids=[" ".join(a) for a in PREPARE_COMMANDS])
def test_readme_prepare_commands_compose(args):
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = compose("prepare", overrides=args)
    assert cfg.prepare.dataset and cfg.prepare.tokenizer == "gpt2"


def test_readme_compare_command_runs(tmp_path, monkeypatch):
    for name, extra in (("single", []), ("ml", ML)):
        run(compose_config(*extra), run_dir=tmp_path / "multirun" / name)
    (args,) = readme_commands("mltrain-compare")
    monkeypatch.chdir(tmp_path)
    assert compare_main(args) == 0
    report = json.loads((tmp_path / "report" / "comparison.json").read_text())
    assert report and (tmp_path / "report" / "comparison.png").stat().st_size > 1000
