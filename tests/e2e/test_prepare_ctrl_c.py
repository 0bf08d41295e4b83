"""Ctrl-C during mltrain-prepare is one line, exit status 130, and the same command resumes it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from helpers import PREPARE, jsonl_file, one_error, run_tool


def test_ctrl_c_during_prepare_is_one_line_exit_130_and_resumable(tmp_path):
    data = jsonl_file(tmp_path / "docs.jsonl", [json.dumps({"text": f"document {i} " * 40}) for i in range(200)])
    out = tmp_path / "out"
    args = [f"prepare.data_files={data}", f"prepare.out_dir={out}", "prepare.workers=2",
            f"prepare.cache_dir={tmp_path / 'hf'}", *PREPARE]
    # Ctrl-C reaches the whole foreground process group (main process and tokenizer workers) right after
    # the first training shard is committed.
    code = textwrap.dedent("""
        import os, signal, sys
        from mltrain.data import prepare
        def ctrl_c(path):
            if "_train_" in path.name:
                os.killpg(os.getpgid(0), signal.SIGINT)
        prepare._after_shard = ctrl_c
        sys.argv = ["mltrain-prepare", *sys.argv[1:]]
        from mltrain.console import prepare_main
        prepare_main()
    """)
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, start_new_session=True)
    line = one_error(proc, "mltrain-prepare", code=130, kind="interrupted")
    assert "2 finished shards" in line and "run the same command again to resume" in line
    done = run_tool("mltrain-prepare", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "prepare_state.json").read_text())["done"]
