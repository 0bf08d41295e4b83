"""The study's own records: its name cannot lead outside its folder, its launcher and every key set on
it are checked before the folder is claimed, secrets in the launcher's environment are redacted in
study.json as run.json redacts them, and `--status` refuses a path that is not the study's folder. Each
against the installed mltrain-study, from a fresh folder outside the repository: one line, nothing
written outside the folder named."""

from __future__ import annotations

import json

from helpers import refused, run_main, tool, tool_here, tree


def one_line(capsys, *argv: str) -> str:
    """The one error line of `mltrain-study <argv>` run in this process (exit 2)."""
    code, _, err = run_main(*argv, capsys=capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("mltrain-study: error: "), err
    return lines[0]


def test_a_study_name_that_is_not_one_folder_name_is_refused_before_anything(tmp_path, capsys, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    line = refused(tool_here("mltrain-study", "study=smoke", "name='../escaped'", cwd=work), "name '../escaped'")
    assert "nothing was written" in line
    monkeypatch.chdir(work)
    for name in ("a/b", "..", "x y"):
        assert f"name {name!r}" in one_line(capsys, "study=smoke", f"name='{name}'")
    assert tree(tmp_path) == {} and sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_an_unknown_launcher_or_launcher_key_is_refused_before_the_folder_is_claimed(tmp_path, capsys):
    study = tmp_path / "study"
    refused(tool_here("mltrain-study", "study=smoke", f"dir={study}", "launcher.name=nosuch", cwd=tmp_path),
            "launcher.name='nosuch' is not a Hydra launcher here (hydra/launcher: basic")
    for args, says in ((["launcher.name=basic", "launcher.n_jobs=2"], "Could not override 'hydra.launcher.n_jobs'"),
                       (["launcher.name=local", "launcher.n_jobs=1", "launcher.overrides=['hydra.launcher.partition=gpu']"],
                        "Could not override 'hydra.launcher.partition'")):
        assert says in one_line(capsys, "study=smoke", f"dir={study}", *args)
    assert not study.exists()


STOP_AFTER_THE_RECORD = ("import mltrain.tools.study.stages as s\n"
                         "def _stop(*a):\n    raise KeyboardInterrupt\n"
                         "s._progress = _stop")


def test_a_secret_in_the_launchers_environment_is_redacted_in_study_json(tmp_path):
    study = tmp_path / "study"
    proc = tool("mltrain-study", "study=smoke", f"dir={study}", "+launcher.env.WANDB_API_KEY=sk-live-4f3c2a",
                "+launcher.env.HF_TOKEN=hf_abcdef", cwd=tmp_path, before=STOP_AFTER_THE_RECORD)
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    text = (study / "study.json").read_text()
    assert "sk-live-4f3c2a" not in text and "hf_abcdef" not in text
    env = json.loads(text)["launcher"]["env"]
    assert env == {"OMP_NUM_THREADS": "1", "WANDB_API_KEY": "<redacted>", "HF_TOKEN": "<redacted>"}


def test_status_refuses_a_file_an_empty_folder_and_another_studys_folder(tmp_path, capsys):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a study\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    other = tmp_path / "other"
    other.mkdir()
    (other / "study.json").write_text(json.dumps({"name": "cpu_ladder"}))
    before = tree(tmp_path)
    refused(tool_here("mltrain-study", "study=smoke", f"dir={a_file}", "--status", cwd=tmp_path), "is not a folder")
    for where, says in ((empty, "holds no study.json"), (other, "is the folder of study 'cpu_ladder', not of 'smoke'")):
        assert says in one_line(capsys, "study=smoke", f"dir={where}", "--status")
    assert tree(tmp_path) == before and not any(p.name.startswith(".mltrain") for p in tmp_path.rglob("*"))
    code, out, _ = run_main("study=smoke", f"dir={tmp_path / 'not yet'}", "--status", capsys=capsys)
    assert code == 0 and "not started" in out  # a study not started yet: what it will run
