"""Every command shown in the README and in docs/*.md is exercised: the install+run and test commands by
.ci/run, the rest here.

Training and preparation commands are composed with Hydra and validated exactly as `mltrain` would at
start-up (a sweep line with its first value of each swept key); `mltrain-compare`, `mltrain-sample` and
`mltrain-export` run for real on short runs made here; the scripts' lines are parsed by the scripts' own
argument parsers; a line of any other program fails. (`mltrain-study` lines: tests/tools/test_study.py, through
helpers.doc_commands.) The README stays the door (8 KB at most), and every relative link of the README and
docs/ points at a file, and a heading, that exists.
"""

import argparse
import importlib.util
import json
import re
import tomllib
from pathlib import Path

import pytest
from helpers import DOC_FILES, ML, REPO, bash_blocks, compose_config, doc_commands, documented_commands, shell_calls, shell_commands, typed  # noqa: F401
from hydra import compose, initialize_config_module

from mltrain.tools.compare import main as compare_main
from mltrain.config import validate
from mltrain.data import prepare as _prepare  # noqa: F401  (registers prepare_schema)
from mltrain.run import run

ROOT = REPO
README = ROOT / "README.md"
DOCS = DOC_FILES
INSTALL = 'python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e ".[dev]" && .venv/bin/mltrain coarsening=evenodd'
TESTS = ".venv/bin/python -m pytest -q -n auto"
TOOLS = {"mltrain", "mltrain-prepare", "mltrain-compare", "mltrain-study", "mltrain-sample", "mltrain-export"}


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
    assert INSTALL in text and TESTS in text
    ci = (ROOT / ".ci" / "run").read_text()
    assert INSTALL in ci and TESTS in ci


def test_the_readme_is_the_door_at_most_8_kb():
    assert README.stat().st_size <= 8_000, f"README.md is {README.stat().st_size} bytes: move reference to docs/"


TRAIN_COMMANDS = documented_commands("mltrain")


@pytest.mark.parametrize("where,args", TRAIN_COMMANDS, ids=[f"{w}: {' '.join(a) or 'mltrain'}" for w, a in TRAIN_COMMANDS])
def test_readme_training_commands_compose_and_validate(where, args):
    overrides = first_values(args)
    cfg = compose_config(*overrides, tiny=False, hydra=True)
    validate(typed(cfg))
    if any(o.startswith("hydra/launcher=") for o in overrides):
        assert cfg.hydra.launcher._target_.startswith("hydra_plugins.")


def test_readme_has_sweep_and_launcher_examples():
    joined = [" ".join(a) for _, a in TRAIN_COMMANDS]
    assert any(a.startswith("-m") and "multilevel.delta=0.1,0.25,0.5" in a for a in joined)
    assert any("hydra/launcher=local" in a for a in joined) and any("hydra/launcher=slurm" in a for a in joined)


PREPARE_COMMANDS = documented_commands("mltrain-prepare")


@pytest.mark.parametrize("where,args", PREPARE_COMMANDS, ids=[f"{w}: {' '.join(a)}" for w, a in PREPARE_COMMANDS])
def test_readme_prepare_commands_compose(where, args):
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = compose("prepare", overrides=args)
    assert cfg.prepare.dataset and cfg.prepare.tokenizer == "gpt2"


def test_readme_compare_command_runs(tmp_path, monkeypatch):
    for name, extra in (("single", []), ("ml", ML)):
        run(typed(compose_config(*extra)), run_dir=tmp_path / "multirun" / name)
    (args,) = doc_commands("mltrain-compare")
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

    (sample_args,) = doc_commands("mltrain-sample")
    (export_args,) = doc_commands("mltrain-export")
    run_dir = sample_args[0]
    assert export_args[0] == run_dir
    (train_args,) = [a for a in doc_commands("mltrain") if f"hydra.run.dir={run_dir}" in a]
    overrides = [a for a in train_args if not a.startswith("hydra.")] + ["train.progress=false"]
    with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    run(typed(cfg), run_dir=tmp_path / run_dir)

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
    """The commands of the Long runs section's first block (stop and resume), in docs/scale-out.md."""
    section = (ROOT / "docs" / "scale-out.md").read_text().split("\n## Long runs\n", 1)[1].split("\n## ", 1)[0]
    return shell_commands(re.findall(r"```bash\n(.*?)```", section, flags=re.S)[0], "mltrain")


@pytest.mark.slow
def test_readme_long_runs_commands_stop_on_ctrl_c_and_resume_to_the_end(tmp_path):
    import signal

    from helpers import cli_here, kill, one_line, start, stderr_of, summary, wait_until

    first, resume, sweep = long_runs_commands()
    assert resume == [*first, "train.resume=true"] and sweep[0] == "-m" and "train.resume=true" in sweep
    run_dir = tmp_path / dict(a.split("=", 1) for a in first)["hydra.run.dir"]
    p = start(first, tmp_path)
    wait_until(p, lambda: (run_dir / "metrics.jsonl").exists() and "train/loss" in (run_dir / "metrics.jsonl").read_text())
    assert kill(p, signal.SIGINT) == 130
    line = one_line(stderr_of(p), "resume with:")
    assert line.endswith(f"mltrain {' '.join(first[:-1])} train.resume=true hydra.run.dir={run_dir.resolve()}")
    proc = cli_here(resume, tmp_path)  # the README's resume line, as written
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary(run_dir)["status"] == "finished" and summary(run_dir)["fine_steps"] == 2000


# --- every line of every bash block is a command that a test above (or test_study.py) checks ------------------

def checked_by(words: list[str]) -> str | None:
    """Which check covers a documented command (None: nothing does, so it must not be shown)."""
    if Path(words[0]).name in TOOLS or "mltrain.cli" in words:
        return "mltrain tools"
    if words[0] in ("python", "python3") and len(words) > 1 and re.fullmatch(r"scripts/\w+\.py", words[1]):
        return "script"
    if words[0] in ("python", "python3") and len(words) == 2 and re.fullmatch(r"docs/examples/\w+\.py", words[1]):
        return "worked example"  # run by tests/docs/test_worked_examples.py
    if " ".join(words[: len(TESTS.split())]) == TESTS:
        return "pytest"
    if " ".join(words) in (".venv/bin/mypy", ".venv/bin/ruff check ."):
        return "static checks"  # the lines .ci/run runs (tests/test_static_checks.py)
    if words[:4] == ["python3", "-m", "venv", ".venv"] or words[:6] == [".venv/bin/pip", "install", "-c", "constraints.txt", "-e", ".[dev]"]:
        return "install"  # the install line, which .ci/run runs (test_readme_has_the_two_commands...)
    return None


ALL_CALLS = [(path.relative_to(ROOT).as_posix(), words) for path in DOCS for words in shell_calls(bash_blocks(path))]


def test_every_documented_command_is_one_the_tests_check():
    unchecked = [f"{where}: {' '.join(words)}" for where, words in ALL_CALLS if checked_by(words) is None]
    assert not unchecked, "commands shown that no test checks:\n" + "\n".join(unchecked)
    assert [w for w, words in ALL_CALLS if checked_by(words) == "install"] == ["README.md", "README.md"]


class _Parsed(Exception):
    pass


SCRIPT_CALLS = [(w, words[1:]) for w, words in ALL_CALLS if checked_by(words) == "script"]


@pytest.mark.parametrize("where,words", SCRIPT_CALLS, ids=[f"{w}: {' '.join(a)}" for w, a in SCRIPT_CALLS])
def test_documented_script_lines_parse_with_the_scripts_own_options(where, words, monkeypatch):
    """The script's main() builds its parser; parsing the documented arguments is where it stops."""
    script, args = ROOT / words[0], words[1:]
    spec = importlib.util.spec_from_file_location(f"doc_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parse = argparse.ArgumentParser.parse_args

    def parse_only(self, argv=None, namespace=None):
        raise _Parsed(parse(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
    with pytest.raises(_Parsed):
        module.main()


def test_documented_pytest_lines_use_registered_markers():
    markers = {m.split(":")[0] for m in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]}
    lines = [words for _, words in ALL_CALLS if checked_by(words) == "pytest"]
    assert lines
    for words in lines:
        for expr in (words[i + 1] for i, w in enumerate(words) if w == "-m" and words[i + 1] != "pytest"):
            assert set(re.findall(r"\w+", expr)) - {"and", "or", "not"} <= markers, expr


# --- links -----------------------------------------------------------------------------------------------------

# Files linked before they exist (a study's report still running, an example that comes with its code):
# name them here, and remove each name when its file arrives. Every study's report is in docs/; the
# examples of docs/contributing.md are all there (test_worked_examples.py runs them).
ARRIVING: set[Path] = set()


def prose(text: str) -> str:
    """Markdown without its fenced blocks and code spans (a link there is not a link)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def relative_links(path: Path) -> list[str]:
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)(?: \"[^\"]*\")?\)", prose(path.read_text()))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_every_relative_link_points_at_a_file_and_heading_that_exist():
    broken = []
    for path in DOCS:
        for link in relative_links(path):
            file, _, anchor = link.partition("#")
            target = (path.parent / file).resolve() if file else path
            if target in ARRIVING and not target.exists():
                continue
            if not target.exists():
                broken.append(f"{path.relative_to(ROOT)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                broken.append(f"{path.relative_to(ROOT)}: {link} (no such heading in {target.name})")
    assert not broken, "\n".join(broken)
    assert sum(len(relative_links(p)) for p in DOCS) > 20  # the links were found at all


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in relative_links(README)}
    assert set(DOCS[1:]) <= linked, sorted(p.name for p in set(DOCS[1:]) - linked)
