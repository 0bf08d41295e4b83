"""mltrain-prepare's bad input and faults, each one line on stderr: a malformed JSONL line, an
unwritable output folder, a full disk (the finished shards are kept)."""

from __future__ import annotations

import json

from helpers import PREPARE, jsonl_file, one_error, run_tool, run_tool_here


def test_a_malformed_jsonl_line_given_to_prepare_is_one_line(tmp_path):
    data = jsonl_file(tmp_path / "docs.jsonl", [json.dumps({"text": "good " * 50})] * 20 + ['{"text": "broken'])
    out = tmp_path / "out"
    proc = run_tool_here("mltrain-prepare", f"prepare.data_files={data}", f"prepare.out_dir={out}", "prepare.workers=1",
                    f"prepare.cache_dir={tmp_path / 'hf'}", *PREPARE, cwd=tmp_path)
    line = one_error(proc, "mltrain-prepare")
    assert "prepare.data_files=" in line and "docs.jsonl" in line


def test_prepare_errors_go_to_stderr_like_mltrain(tmp_path):
    proc = run_tool_here("mltrain-prepare", f"prepare.data_files={tmp_path / 'none.jsonl'}", f"prepare.out_dir={tmp_path / 'o'}",
                    *PREPARE, cwd=tmp_path)
    line = one_error(proc, "mltrain-prepare")
    assert "matches no files" in line and proc.stdout == ""


def test_prepare_into_an_unwritable_out_dir_is_one_line(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    line = one_error(run_tool_here("mltrain-prepare", f"prepare.out_dir={blocker}/out", *PREPARE, cwd=tmp_path), "mltrain-prepare")
    assert f"prepare.out_dir={blocker}/out" in line


def test_a_full_disk_while_preparing_keeps_the_finished_shards(tmp_path):
    data = jsonl_file(tmp_path / "docs.jsonl", [json.dumps({"text": f"document {i} " * 40}) for i in range(100)])
    out = tmp_path / "out"
    proc = run_tool("mltrain-prepare", f"prepare.data_files={data}", f"prepare.out_dir={out}", "prepare.workers=1",
               f"prepare.cache_dir={tmp_path / 'hf'}", *PREPARE, "prepare.shard_tokens=20000",
               cwd=tmp_path, limits={"RLIMIT_FSIZE": 30_000})  # the val shard fits, a train shard does not
    line = one_error(proc, "mltrain-prepare")
    assert "File too large" in line and "1 finished shard" in line
    assert [p.name for p in out.glob("*.bin")] == ["fineweb_edu_val_000000.bin"]
