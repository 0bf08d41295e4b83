"""Errors raised before our own checks start, through the installed tools from a fresh folder: an
operating-system error (a name too long, a full disk) in Hydra's own writers or in ours, an override
Hydra's lexer cannot read (a non-ASCII value, unquoted), a `.jsonl` text field that is no string, a
log file on a full disk: each ends in one error line, no traceback, nothing written outside the folder."""

from __future__ import annotations

import json

import pytest

from helpers import PREPARE, TOOL_SMOKE, refused, tool, tool_here, tree

LONG = "n" * 300  # one path component longer than any Linux file system allows (255 bytes)


@pytest.mark.parametrize("where", ["run", "sweep"])
def test_a_run_dir_whose_name_is_too_long_is_one_line(tmp_path, where):
    args = ["-m", *TOOL_SMOKE, "seed=1,2", f"hydra.sweep.dir={tmp_path / LONG}"] if where == "sweep" else [
        *TOOL_SMOKE, f"hydra.run.dir={tmp_path / LONG}"]
    line = refused(tool_here("mltrain", *args, cwd=tmp_path), "File name too long")
    assert f"hydra.{where}.dir" in line and "shorter" in line
    assert tree(tmp_path) == {}


@pytest.mark.parametrize("override", ["logger.run_name=Ωmega", "data.path=/tmp/données/x.txt"])
def test_an_unquoted_non_ascii_value_is_one_line_that_says_how_to_quote_it(tmp_path, override):
    line = refused(tool_here("mltrain", *TOOL_SMOKE, override, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path),
                   f"cannot parse override {override!r}")
    key, value = override.split("=", 1)
    hint = line.rsplit(" ", 1)[1]
    assert hint == f"'{key}=\"{value}\"'", line
    assert not (tmp_path / "run").exists()
    composed = tool_here("mltrain", *TOOL_SMOKE, hint.strip("'"), "--cfg", "job", cwd=tmp_path)  # the hint works
    assert composed.returncode == 0 and value in composed.stdout, composed.stderr[-2000:]


@pytest.mark.parametrize("name, args", [("mltrain-prepare", [*PREPARE, "prepare.out_dir=données"]),
                                        ("mltrain-study", ["study=smoke", "name=研究", "dir=study"])])
def test_prepare_and_study_say_the_same_of_their_own_overrides(tmp_path, name, args):
    line = refused(tool_here(name, *args, cwd=tmp_path), "quote a value with spaces, non-ASCII letters")
    key, value = args[-2 if name == "mltrain-study" else -1].split("=", 1)
    assert line.endswith(f"'{key}=\"{value}\"'"), line
    assert tree(tmp_path) == {}


FULL_DISK_AT = """
import errno, hydra.core.utils as hu
def full(cfg, filename, output_dir):
    raise OSError(errno.ENOSPC, "No space left on device", str(output_dir / filename))
hu._save_config = full
"""


def test_a_full_disk_while_hydra_writes_its_config_is_one_line(tmp_path):
    proc = tool("mltrain", *TOOL_SMOKE, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, before=FULL_DISK_AT)
    line = refused(proc, "No space left on device")
    assert str(tmp_path / "run" / ".hydra" / "config.yaml") in line and "free some space" in line


@pytest.mark.parametrize("bad, says", [("42", "is 42 (int)"), ('["a", "b"]', 'is ["a", "b"] (list)'),
                                       ('{"t": 1}', 'is {"t": 1} (dict)')])
def test_a_jsonl_text_field_that_is_not_a_string_names_the_file_and_line(tmp_path, bad, says):
    data = tmp_path / "docs.jsonl"
    data.write_text('{"text": "a first document"}\n{"text": "a second"}\n{"text": "a third"}\n{"text": ' + bad + '}\n')
    line = refused(tool_here("mltrain-prepare", *PREPARE, f"prepare.data_files={data}", f"prepare.out_dir={tmp_path / 'out'}",
                             cwd=tmp_path), f"{data}, line 4: prepare.text_field='text' {says}")
    assert "not a string" in line


LOG_ON_FULL_DISK = """
import logging
logging.FileHandler._open = lambda self: open("/dev/full", "w", encoding="utf-8")
"""


def test_prepare_whose_log_file_is_on_a_full_disk_prints_no_logging_traceback(tmp_path):
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": f"document {i} " * 40}) + "\n" for i in range(40)))
    proc = tool("mltrain-prepare", *PREPARE, f"prepare.data_files={data}", f"prepare.out_dir={tmp_path / 'out'}",
                cwd=tmp_path, before=LOG_ON_FULL_DISK)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Logging error" not in proc.stderr, proc.stderr[-3000:]
    assert list((tmp_path / "out").glob("*.bin"))


@pytest.mark.parametrize("name, args", [
    ("mltrain-sample", [f"runs/{LONG}"]),
    ("mltrain-export", [f"runs/{LONG}", "hf"]),
    ("mltrain-compare", ["runs", "--out", f"out/{LONG}"]),
])
def test_the_other_tools_say_a_name_too_long_in_one_line(tmp_path, name, args):
    from helpers import fake_runs

    fake_runs(tmp_path)
    before = tree(tmp_path)
    refused(tool_here(name, *args, cwd=tmp_path), "File name too long")
    assert tree(tmp_path) == before
