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

from mltrain.tools.compare import main as compare_main
from mltrain.config import validate
from mltrain.data import prepare as _prepare  # noqa: F401  (registers prepare_schema)
from mltrain.run import run

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands(program: str) -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    return shell_commands("\n".join(blocks), program)


def shell_commands(text: str, program: str) -> list[list[str]]:
    """The arguments of each call of `program` in shell text (continuations joined, comments and the
    scripts' $out variable left out): `program ...` after any VAR=value assignments, and for mltrain
    also the module form under a launcher (`torchrun ... -m mltrain.cli ...`, `srun python -m mltrain.cli ...`)."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.split("#")[0].strip() if line.lstrip().startswith("#") else line.split("  #")[0].strip()
        for part in line.split("&&"):
            words = shlex.split(part.replace("$out", "out"))
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
                words = words[1:]  # an environment assignment before the command
            if words and Path(words[0]).name == program:
                commands.append(words[1:])
            elif program == "mltrain" and "mltrain.cli" in words:
                commands.append(words[words.index("mltrain.cli") + 1:])
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


TRAIN_COMMANDS = readme_commands("mltrain")


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


def test_readme_sample_and_export_commands_run(tmp_path, monkeypatch, capsys):
    """The README's training line for the run that mltrain-sample and mltrain-export read is run (tiny),
    then both commands exactly as written; the export loads in transformers with mltrain's logits."""
    import torch

    from mltrain.tools.export import main as export_main
    from mltrain.run import run
    from mltrain.tools.sample import main as sample_main
    from mltrain.runs.weights import load_weights

    (sample_args,) = readme_commands("mltrain-sample")
    (export_args,) = readme_commands("mltrain-export")
    run_dir = sample_args[0]
    assert export_args[0] == run_dir
    (train_args,) = [a for a in readme_commands("mltrain") if f"hydra.run.dir={run_dir}" in a]
    overrides = [a for a in train_args if not a.startswith("hydra.")] + ["train.progress=false"]
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    run(cfg, run_dir=tmp_path / run_dir)

    monkeypatch.chdir(tmp_path)
    assert sample_main(sample_args) == 0
    prompt = sample_args[sample_args.index("--prompt") + 1]
    assert capsys.readouterr().out.startswith(prompt)
    assert export_main(export_args) == 0
    transformers = pytest.importorskip("transformers")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / export_args[1]).eval()
    model, _ = load_weights(tmp_path / run_dir)
    idx = torch.randint(0, model.config.vocab_size, (2, model.config.block_size))
    with torch.no_grad():
        assert (hf(idx).logits - model(idx)[0]).abs().max().item() < 1e-4


def long_runs_commands() -> list[list[str]]:
    """The commands of the Long runs section's first block (stop and resume)."""
    section = README.read_text().split("\n## Long runs\n", 1)[1].split("\n## ", 1)[0]
    return shell_commands(re.findall(r"```bash\n(.*?)```", section, flags=re.S)[0], "mltrain")


@pytest.mark.slow
def test_readme_long_runs_commands_stop_on_ctrl_c_and_resume_to_the_end(tmp_path):
    import signal

    from cli_helpers import cli, kill, one_line, start, stderr_of, summary, wait_until

    first, resume, sweep = long_runs_commands()
    assert resume == [*first, "train.resume=true"] and sweep[0] == "-m" and "train.resume=true" in sweep
    run_dir = tmp_path / dict(a.split("=", 1) for a in first)["hydra.run.dir"]
    p = start(first, tmp_path)
    wait_until(p, lambda: (run_dir / "metrics.jsonl").exists() and "train/loss" in (run_dir / "metrics.jsonl").read_text())
    assert kill(p, signal.SIGINT) == 130
    line = one_line(stderr_of(p), "resume with:")
    assert line.endswith(f"mltrain {' '.join(first[:-1])} train.resume=true hydra.run.dir={run_dir.resolve()}")
    proc = cli(resume, tmp_path)  # the README's resume line, as written
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary(run_dir)["status"] == "finished" and summary(run_dir)["fine_steps"] == 2000
