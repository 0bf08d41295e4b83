"""The fault matrix: bad input and faults a user meets, by fault class, each run through the installed
console scripts from a fresh temporary folder and judged by helpers.judge (one clear error line, exit 2 or
130 for Ctrl-C, no traceback, earlier output unchanged; or, for a case that must succeed, success).

This module holds the cases no other test checks at the same entry point with the same expectation.
COVERED names, class by class, the test that checks each of the others: through the installed tool, or,
where the tool's one line for that error class is checked through the CLI elsewhere, at the function the
tool calls (validate() per key, the run-dir claim, the checkpoint loader). LEFT_OUT names the one case
run nowhere, and why. The resume cases share one finished smoke run (made once for the suite, copied per
case)."""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import re
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pytest
import torch
from helpers import (ENV, NO_ROOM, PREPARE, TOOL_BIN, TOOL_SMOKE, fake_runs, from_a_terminal, jsonl_file, judge,
                     judged_lines, made_once, output_of, saved_run, tool, tool_here, unwritable_dir, victim)

from mltrain.data import shards
from mltrain.runs.rundir import LOCK_FILE

COVERED = {
    "runs that mix": {
        "same hydra.run.dir, two starts at once":
            "e2e/test_run_dirs_under_contention.py::test_two_runs_started_together_into_one_dir_never_mix",
        "hydra.run.dir of a live run":
            "runs/test_run_dirs.py::test_a_run_dir_in_use_by_a_live_run_is_refused_and_untouched",
        "default dir taken by a run of the same second, two default-dir runs started at once":
            "e2e/test_run_dirs_under_contention.py::"
            "test_default_run_dirs_are_unique_even_within_one_second_and_two_runs_started_at_once_get_one_each",
        "re-run a sweep over its killed jobs":
            "runs/test_run_dirs.py::test_rerunning_a_sweep_over_killed_jobs_leaves_their_hydra_files_alone",
        "hydra.sweep.dir of a live sweep": "runs/test_run_dirs.py::test_a_sweep_dir_in_use_by_a_live_sweep_is_refused",
    },
    "keys that vanish": {  # the check the CLI runs, per key; its one line through the CLI for one key
        "+train.max_step=3, ++train.max_step=3, +foo=1, +model.n_layers=2, +multilevel.coarse_optim.lr_min=0.1, "
        "+data.paths=x.txt":
            "config/test_config_values.py::test_a_key_outside_the_schema_is_refused_with_or_without_plus"
                             " and ::test_a_key_outside_the_schema_stops_the_cli_before_anything_is_written",
    },
    "values that slip through": {  # as above: every float key nan/inf, every int key beyond 64 bits, the ranges
        "optim.lr=inf|nan, optim.weight_decay=nan, train.grad_clip=nan|inf, optim.eps=nan, schedule.min_lr=nan, "
        "multilevel.coarse_optim.lr=nan, model.dropout=nan, multilevel.delta=nan, data.val_fraction=inf, "
        "optim.momentum=inf": "config/test_config_values.py::test_every_float_key_must_be_finite_and_is_named"
                              " and ::test_a_nan_value_stops_the_cli_with_its_key_before_anything_is_built",
        "train.max_steps=1e20": "config/test_config_values.py::test_every_int_key_must_fit_in_64_bits_and_is_named",
        "optim.eps=0|-1, multilevel.coarse_optim.eps=0, optim.betas=[0.9,nan], model.vocab_size=0":
            "config/test_config_values.py::test_ranges_name_the_key",
        "seed=-1": "config/test_config.py::test_semantic_errors_have_one_clear_message",
    },
    "ordinary trouble": {
        "hydra.run.dir below a file, hydra.run.dir read-only":
            "runs/test_run_dirs.py::test_an_unwritable_run_dir_is_one_line",
        "working dir read-only": "run/test_cli_errors.py::test_an_unwritable_working_dir_is_one_line",
        "data.cache_dir below a file": "data/test_data_errors.py::test_an_unwritable_token_cache_is_one_line",
        "prepare: malformed JSONL line":
            "data/test_prepare_errors.py::test_a_malformed_jsonl_line_given_to_prepare_is_one_line",
        "prepare: Ctrl-C": "e2e/test_prepare_ctrl_c.py::test_ctrl_c_during_prepare_is_one_line_exit_130_and_resumable",
        "prepare: out_dir below a file":
            "data/test_prepare_errors.py::test_prepare_into_an_unwritable_out_dir_is_one_line",
        "prepare: error goes to stderr": "data/test_prepare_errors.py::test_prepare_errors_go_to_stderr_like_mltrain",
        "compare --out read-only": "tools/test_compare_bad_input.py::test_compare_into_a_read_only_out_is_one_line",
    },
    "full disk": {
        "metrics.jsonl": "e2e/test_full_disk.py::test_a_full_disk_keeps_whole_rows_and_stops_with_one_line",
        "final checkpoint and weights":
            "run/test_cli_errors.py::test_a_full_disk_at_the_end_of_a_run_says_what_is_kept",
        "token cache": "data/test_data_errors.py::test_a_full_disk_while_tokenizing_leaves_no_cache_entry",
        "prepare: shards": "data/test_prepare_errors.py::test_a_full_disk_while_preparing_keeps_the_finished_shards",
    },
    "data that is not text": {
        "data.path: random bytes, a token shard":
            "data/test_data_errors.py::test_a_binary_data_path_is_refused_naming_the_file",
    },
    "expensive before cheap": {
        "model.block_size=100000000":
            "run/test_cli_errors.py::test_a_context_longer_than_the_data_is_refused_before_the_model_is_built",
        "a 206B-parameter model, train.batch_size=20000000":
            "model/test_memory.py::test_a_model_that_cannot_fit_is_refused_with_its_size_before_allocating",
    },
    "writes through links": {  # in-process: the claim, tracker, cache and compare the CLI calls
        "compare: comparison.md a link outside":
            "core/test_guarded_writes.py::test_compare_refuses_each_of_its_files_as_a_link_and_writes_none",
    },
    "foreign or damaged state": {
        "resume: newest checkpoint from another run (seed)":
            "training/test_foreign_checkpoints.py::test_a_checkpoint_of_another_run_of_the_same_shape_is_refused_naming_the_key"
            " (through the CLI, another model's: e2e/test_kill_and_resume.py::"
            "test_resume_refuses_another_config_leaves_a_finished_run_alone_and_changes_nothing_first)",
    },
    "records overwritten": {
        "sweep train.checkpoint_interval=5,6":
            "runs/test_sweep_checks.py::test_sweep_points_that_would_share_a_job_dir_are_refused_before_hydra_writes",
        "diverged after a resume: sample uses stale weights":
            "runs/test_weights_file.py::test_a_run_that_diverges_leaves_no_earlier_weights_and_the_tools_say_why",
    },
    "unbounded resources": {
        "hydra.launcher.n_jobs=0, -3, 4x the CPUs":
            "runs/test_sweep_checks.py::test_parallel_jobs_are_bounded_by_the_cpus"
                                                    " and ::test_a_bad_n_jobs_leaves_the_sweep_dir_free",
        "sweep killed (SIGKILL): its workers end":
            "e2e/test_parallel_sweeps.py::test_no_worker_outlives_a_killed_sweep",
        "sample --max-new-tokens 1e12: streams, Ctrl-C":
            "tools/test_sample_export.py::test_sampling_streams_and_holds_only_one_context and "
            "::test_sample_stops_quietly_when_its_reader_goes_and_in_one_line_on_ctrl_c",
    },
    "distributed faults": {
        "MASTER_* set, no other rank; rank 1 alone":
            "training/test_distributed.py::test_ranks_without_a_launcher_say_what_is_missing_and_time_out",
        "batch 3 over 2 ranks": "e2e/test_lost_ranks.py::test_a_batch_the_ranks_cannot_split_is_said_once",
        "a rank killed mid-run": "e2e/test_lost_ranks.py::test_a_rank_killed_mid_run_stops_the_other_with_one_line",
    },
    "lines that lie": {
        "resume command for a dir with a comma, (), ü, a quote and a space":
            "training/test_resume_check.py::test_the_resume_command_quotes_run_dirs_for_hydra_and_the_shell (the printed"
            " command pasted: e2e/test_signals_and_divergence.py::"
            "test_sigterm_then_the_printed_command_resumes_to_the_same_end_as_an_uninterrupted_run)",
        "checkpoint: permission denied is not a full disk":
            "training/test_foreign_checkpoints.py::test_a_permission_error_is_not_called_a_full_disk",
        "corrupt tiktoken cache": "data/test_data_errors.py::test_a_corrupt_tiktoken_cache_is_named_and_kept",
        "sweep: a job fails at run time":
            "run/test_sweeps.py::test_a_failing_job_is_reported_once_and_the_sweep_goes_on",
        "sweep: a later point's bad value":
            "run/test_sweeps.py::test_a_bad_value_of_a_later_sweep_point_stops_the_sweep_before_its_first_job",
    },
    "the tools' edges": {
        "mltrain-sample --temperature 1e-45, inf, --prompt not UTF-8":
            "tools/test_sample_export.py::test_sample_edges_temperature_and_prompt",
        "mltrain-export below a file":
            "tools/test_sample_export.py::test_export_into_a_place_it_cannot_write_is_one_line_and_leaves_nothing",
    },
    "secrets": {
        "+hydra.job.env_set.WANDB_API_KEY (run)": "runs/test_secrets.py::test_a_run_records_no_secret_anywhere",
    },
    "study and tools: writes through links": {
        "study: ladder.md, ladder.png, d16/verdict, study.log, d16/selection.json":
            "core/test_guarded_writes.py::test_a_study_with_a_link_where_it_writes_is_refused_in_one_line",
        "compare: comparison.png":
            "core/test_guarded_writes.py::test_compare_refuses_each_of_its_files_as_a_link_and_writes_none",
        "export: model.safetensors a dangling link":
            "core/test_guarded_writes.py::test_export_never_writes_through_a_link_in_its_folder",
        "prepare: .prepare_logs":
            "core/test_guarded_writes.py::test_prepare_refuses_a_linked_log_folder_before_hydra_writes_into_it",
    },
    "study: state from its config": {
        "grid changed": "e2e/test_study_state.py::test_a_changed_grid_chooses_and_judges_only_on_the_runs_it_asks_for",
        "--status after selection.json edited":
            "e2e/test_study_state.py::test_status_does_not_believe_a_hand_edited_selection_and_the_next_run_chooses_again",
        "--status: a live study's running job":
            "e2e/test_study_state.py::test_status_tells_a_running_job_and_a_live_study_from_ones_to_resume",
    },
    "numbers without common sense": {
        "study tokens_per_param=inf|1e15, ladder.d16.tokens_per_param=inf, launcher.env.OMP_NUM_THREADS=0|abc, "
        "+launcher.env.MKL_NUM_THREADS=-1 (=1.5 there), "
        "predict_params=[inf], hydra.* key in a grid or in common":
            "runs/test_sanity.py::test_a_study_number_or_key_without_sense_is_one_line_before_anything"
            " and ::test_the_installed_study_refuses_infinity_and_a_thread_count_of_zero",
        "study tokens_per_param=50000":
            "runs/test_sanity.py::test_a_study_far_longer_than_a_day_here_needs_consent_and_says_its_estimate",
        "run: scale=paper on a CPU":
            "runs/test_sanity.py::test_a_paper_scale_run_on_a_cpu_is_refused_with_its_estimate_before_its_first_step",
    },
    "caches and sidecars": {
        "shard rewritten in place, old mtime put back":
            "data/test_inputs_judged_once.py::test_a_shard_rewritten_in_place_with_its_old_mtime_is_refused_before_training",
        "token cache file changed under its meta":
            "data/test_inputs_judged_once.py::test_a_token_cache_changed_under_its_meta_is_rebuilt",
        "token cache file changed with its checksums":
            "data/test_inputs_judged_once.py::test_a_token_cache_changed_with_its_checksums_is_one_line",
        "token cache zero-filled at its right size":
            "data/test_data_proves_itself.py::test_a_zero_filled_cache_file_is_rebuilt_not_used",
        "sample/export: model.json says 100,000 blocks, 4096 positions":
            "data/test_inputs_judged_once.py::test_model_json_is_compared_with_the_weights_header_before_anything_is_built",
    },
    "lossy input": {
        "prepare: a .txt of random bytes":
            "data/test_inputs_judged_once.py::test_prepare_and_data_text_refuse_the_same_undecodable_file",
        "prepare and data=text: a few undecodable bytes":
            "data/test_inputs_judged_once.py::test_a_few_undecodable_bytes_are_taken_with_one_warning_by_both",
        "prepare: an empty .jsonl, a .jsonl of blank lines":
            "data/test_inputs_judged_once.py::test_prepare_names_an_empty_jsonl_in_one_line",
    },
    "partial results": {
        "export, sample: an interrupted run's weights; export: a NaN last val loss":
            "tools/test_tool_edges.py::test_export_and_sample_say_when_the_weights_are_not_a_finished_runs",
    },
    "errors that name the problem": {
        "study yaml: badkey, badinterp, badyaml":
            "tools/test_tool_edges.py::test_an_error_in_a_study_yaml_names_the_key_and_the_file",
        "study: a malformed override": "tools/test_tool_edges.py::test_a_malformed_override_is_named_as_itself",
        "compare: a label with |, a newline, | and #":
            "tools/test_tool_edges.py::test_a_label_cannot_break_the_tables_of_comparison_md",
    },
    "stalls and noise at the edges": {
        "W&B online, a key, no network":
            "tools/test_tool_edges.py::test_wandb_online_without_a_network_goes_offline_at_once_in_one_line",
        "mltrain, mltrain-study, mltrain-sample: Ctrl-C while torch imports":
            "tools/test_tool_edges.py::test_ctrl_c_while_torch_imports_is_one_line",
        "study: the disk fills at the ladder plot":
            "e2e/test_study_state.py::test_a_disk_that_fills_while_the_study_writes_its_plot_is_one_line",
    },
}

# A case of the matrix not run here nor checked elsewhere, and why.
LEFT_OUT = {
    "study: state from its config": {
        "selection_seeds changed: the old seed's runs":
            "a second tuning stage of the smoke study (8 more runs, about a minute on 2 cores); the same rule (what a"
            " study reports follows from its config) is checked for a changed grid in e2e/test_study_state.py",
    },
}

CKPT = ["train.checkpoint_interval=2", "train.keep_checkpoints=3"]
SECRET = "s3cr3t-value-0123456789abcdef0123456789abcdef"


def no_room(limits: dict) -> str:
    """Python run before the tool: its resource limits (as `before` of helpers.tool)."""
    return "import resource\n" + "".join(f"resource.setrlimit(resource.{k}, ({v}, {v}))\n" for k, v in limits.items())


def mltrain(tmp: Path, *args: str, env: Optional[dict] = None, before: str = "") -> subprocess.CompletedProcess:
    """`mltrain <TOOL_SMOKE> <args>`: in this process (helpers.tool_here), but with an environment (the
    ranks' variables, W&B's) or a fault injected first (`before`), which need a process of their own."""
    if env is None and not before:
        return tool_here("mltrain", *TOOL_SMOKE, *args, cwd=tmp)
    return tool("mltrain", *TOOL_SMOKE, *args, cwd=tmp, env=env, before=before)


# ---------------------------------------------------------------------------------------------
# Refused in one line, before anything: (class, case, setup(tmp) -> the tool's command, needle)


def a_file(tmp: Path) -> Path:
    (tmp / "a_file").write_text("not a folder\n")
    return tmp / "a_file"


def linked(name: str) -> Callable[[Path], list[str]]:
    """A fresh run dir whose `name` is a link to a file outside it."""
    def setup(tmp: Path) -> list[str]:
        link = tmp / "run" / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(victim(tmp))
        return ["mltrain", *TOOL_SMOKE, f"hydra.run.dir={tmp / 'run'}"]
    return setup


def sweep_of(*points: str) -> Callable[[Path], list[str]]:
    return lambda tmp: ["mltrain", "-m", *TOOL_SMOKE, *points, f"hydra.sweep.dir={tmp / 'sweep'}"]


def prepare_without_text_field(tmp: Path) -> list[str]:
    data = jsonl_file(tmp / "docs.jsonl", [json.dumps({"body": "x " * 50})] * 20)
    return ["mltrain-prepare", f"prepare.data_files={data}", f"prepare.out_dir={tmp / 'out'}",
            f"prepare.cache_dir={tmp / 'hf'}", "prepare.workers=1", *PREPARE]


def compare_below_a_file(tmp: Path) -> list[str]:
    return ["mltrain-compare", str(fake_runs(tmp)), "--out", f"{a_file(tmp)}/report"]


def cache_linked(tmp: Path) -> list[str]:
    (tmp / "notes.txt").write_text("some text to train on\n" * 3000)
    (tmp / "cache").mkdir()
    (tmp / "cache" / "tokens").symlink_to(victim(tmp).parent, target_is_directory=True)
    return ["mltrain", *TOOL_SMOKE, "data=text", f"data.path={tmp / 'notes.txt'}", f"data.cache_dir={tmp / 'cache'}",
            f"hydra.run.dir={tmp / 'run'}"]


def study_eval_linked(tmp: Path) -> list[str]:
    (tmp / "study" / "d16").mkdir(parents=True)
    (tmp / "study" / "d16" / "eval").symlink_to(victim(tmp).parent, target_is_directory=True)
    return ["mltrain-study", "study=smoke", "~ladder.d32", f"dir={tmp / 'study'}"]


def own_study(name: str, body: str) -> Callable[[Path], list[str]]:
    """mltrain-study on a study yaml of the user's own (found through hydra.searchpath)."""
    def setup(tmp: Path) -> list[str]:
        (tmp / "mine" / "study").mkdir(parents=True)
        (tmp / "mine" / "study" / f"{name}.yaml").write_text(
            f"# @package _global_\ndefaults: [smoke]\nname: {name}\n{body}")
        return ["mltrain-study", f"study={name}", f"hydra.searchpath=[file://{tmp / 'mine'}]", f"dir={tmp / 'study'}"]
    return setup


def export_read_only(tmp: Path) -> list[str]:
    run_dir, _ = saved_run(tmp)
    return ["mltrain-export", str(run_dir), f"{unwritable_dir(tmp)}/out"]


REFUSED = [
    ("keys that vanish", "+train.eval_every=5",
     lambda tmp: ["mltrain", *TOOL_SMOKE, "+train.eval_every=5", f"hydra.run.dir={tmp / 'run'}"],
     "train.eval_every", {}),
    ("ordinary trouble", "data.path missing",
     lambda tmp: ["mltrain", *TOOL_SMOKE, "data=text", f"data.path={tmp / 'none.txt'}", f"hydra.run.dir={tmp / 'run'}"],
     "none.txt", {}),
    ("ordinary trouble", "prepare: JSONL without the text field", prepare_without_text_field, "text_field", {}),
    ("ordinary trouble", "compare --out below a file", compare_below_a_file, "report", {}),
    ("expensive before cheap", "model.vocab_size=10000000000",
     lambda tmp: ["mltrain", *TOOL_SMOKE, "model.vocab_size=10000000000", f"hydra.run.dir={tmp / 'run'}"], "parameters",
     NO_ROOM),
    ("writes through links", "lock file a link to a file outside", linked(LOCK_FILE), "symbolic link", {}),
    ("writes through links", ".hydra/config.yaml a link (fresh run dir)", linked(".hydra/config.yaml"),
     "symbolic link", {}),
    ("writes through links", "cli.log a link (fresh run dir)", linked("cli.log"), "symbolic link", {}),
    ("writes through links", "token cache folder a link outside", cache_linked, "tokens", {}),
    ("study and tools: writes through links", "study: d16/eval a link out of the study", study_eval_linked,
     "symbolic link", {}),
    ("records overwritten", "sweep train.progress=true,false (left out of dir names)",
     sweep_of("train.progress=true,false"), "share", {}),
    ("records overwritten", "sweep seed=1,1 (one point twice)", sweep_of("seed=1,1"), "share", {}),
    ("the tools' edges", "mltrain-export into a read-only place", export_read_only, "out", {}),
    ("errors that name the problem", "study yaml: a key of an added arm misspelt",
     own_study("badarm", "arms: {extra: {experiment: multilevel, gird: {}}}\n"), "arms.extra.gird", {}),
]
DISTRIBUTED = [("RANK/WORLD_SIZE without MASTER_ADDR", {"WORLD_SIZE": "2", "RANK": "0"}, "MASTER_ADDR"),
               ("RANK=3 with WORLD_SIZE=2", {"WORLD_SIZE": "2", "RANK": "3"}, "RANK")]


@pytest.mark.parametrize("cls, case, setup, needle, limits", [pytest.param(*c, id=f"{c[0]}: {c[1]}") for c in REFUSED])
def test_refused_in_one_line_before_anything(tmp_path, cls, case, setup, needle, limits):
    command = setup(tmp_path)
    kept = {tmp_path / "outside": output_of(tmp_path / "outside")} if (tmp_path / "outside").exists() else {}
    if (tmp_path / "runs").exists():
        kept[tmp_path / "runs"] = output_of(tmp_path / "runs")
    if limits:  # resource limits: a process of its own
        proc = tool(command[0], *command[1:], cwd=tmp_path, before=no_room(limits))
    else:
        proc = tool_here(command[0], *command[1:], cwd=tmp_path)
    judge(proc, needle, kept=kept)
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not list(tmp_path.glob("sweep/*/.hydra"))
    assert not (tmp_path / "study" / LOCK_FILE).exists()  # a study refused before it claimed its folder


@pytest.mark.parametrize("case, env, needle", DISTRIBUTED, ids=[c[0] for c in DISTRIBUTED])
def test_distributed_faults_a_rank_alone_is_one_line(tmp_path, case, env, needle):
    proc = mltrain(tmp_path, f"hydra.run.dir={tmp_path / 'run'}", env={"MLTRAIN_RENDEZVOUS_TIMEOUT_S": "5", **env})
    judge(proc, needle)


def test_numbers_without_common_sense_a_paper_scale_sweep_on_a_cpu_fails_its_job_in_one_line(tmp_path):
    proc = tool_here("mltrain", "-m", "scale=paper", "data=embedded", "data.tokenizer=bytes", "device=cpu",
                     "train.progress=false", "seed=0", f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    judge(proc, "train.allow_long", code=1)


MODEL_JSON = [("mltrain-sample", {"n_embd": 1_000_000}, "model.json"),
              ("mltrain-export", {"n_layer": 10**9}, "model.json"),
              ("mltrain-export", {"n_head": 3}, "n_head"),
              ("mltrain-sample", {"block_size": -4}, "block_size")]


@pytest.mark.parametrize("name, fields, needle", MODEL_JSON, ids=[f"{n} {f}" for n, f, _ in MODEL_JSON])
def test_unbounded_resources_a_model_json_out_of_bounds_is_one_line_before_allocating(tmp_path, name, fields, needle):
    run_dir, _ = saved_run(tmp_path)
    info = json.loads((run_dir / "model.json").read_text())
    info["model"].update(fields)
    (run_dir / "model.json").write_text(json.dumps(info))
    extra = [str(tmp_path / "out")] if name == "mltrain-export" else ["--max-new-tokens", "5"]
    judge(tool(name, str(run_dir), *extra, cwd=tmp_path, before=no_room(NO_ROOM)), needle)
    assert not (tmp_path / "out").exists()


def test_the_tools_edges_export_over_the_file_size_limit_is_one_line_and_exports_nothing(tmp_path):
    run_dir, _ = saved_run(tmp_path)
    proc = tool("mltrain-export", str(run_dir), str(tmp_path / "out"), cwd=tmp_path,
                before=no_room({"RLIMIT_FSIZE": 60_000}))
    judge(proc, "out")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_the_tools_edges_sample_into_a_reader_that_goes_ends_quietly(tmp_path):
    run_dir, _ = saved_run(tmp_path)
    # more text than a pipe holds (64 kB): the reader has gone before all of it is written
    cmd = f"{shlex.quote(str(TOOL_BIN / 'mltrain-sample'))} {shlex.quote(str(run_dir))} --max-new-tokens 70000"
    proc = subprocess.run(["bash", "-c", cmd + " | head -c 50 > /dev/null; echo ${PIPESTATUS[0]} >&2"], cwd=tmp_path,
                          env=ENV, capture_output=True, text=True, timeout=300)
    *said, status = proc.stderr.strip().splitlines()
    assert status in ("0", "141") and not judged_lines("\n".join(said)) and "Exception ignored" not in proc.stderr, \
        proc.stderr[-2000:]


def test_the_tools_edges_ctrl_c_during_sampling_is_one_line_exit_130(tmp_path):
    run_dir, _ = saved_run(tmp_path)
    # As a user's Ctrl-C reaches it: the tool started as a terminal's foreground job (SIGINT handled),
    # whatever SIGINT disposition the suite itself inherited.
    cmd = from_a_terminal([str(TOOL_BIN / "mltrain-sample"), str(run_dir), "--max-new-tokens", "100000000"])
    p = subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    assert p.stdout.read(20)  # generating
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    # stdout is the generated text, not a message: judged on stderr
    judge(subprocess.CompletedProcess(p.args, p.returncode, "", err.decode(errors="replace")), "Ctrl-C", code=130)


# ---------------------------------------------------------------------------------------------
# Foreign or damaged state at a resume: one shared unfinished smoke run, copied per case


@pytest.fixture(scope="session")
def finished(tmp_path_factory) -> Path:
    """A finished smoke run with checkpoints (3, the newest at its last step), made once for the suite."""
    def make(root: Path) -> None:
        proc = mltrain(root, *CKPT, f"hydra.run.dir={root / 'run'}")
        assert proc.returncode == 0, proc.stderr[-2000:]

    return made_once(tmp_path_factory, "finished_with_checkpoints", make) / "run"


def unfinished(finished: Path, tmp: Path) -> Path:
    """A copy of `finished` as a SIGKILL leaves a run: checkpoints and rows, no summary or weights."""
    run = tmp / "run"
    shutil.copytree(finished, run, ignore=shutil.ignore_patterns(LOCK_FILE, "summary.json", "model.*"))
    return run


def checkpoints_of(run: Path) -> list[Path]:
    return sorted((run / "checkpoints").glob("step-*.pt"))


def resume(tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    return mltrain(tmp, *CKPT, *extra, "train.resume=true", f"hydra.run.dir={tmp / 'run'}")


def metrics_linked(run: Path) -> None:
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(victim(run.parent))


def without_optimizer(run: Path) -> None:
    *older, newest = checkpoints_of(run)
    for path in older:
        path.unlink()
    payload = torch.load(newest, weights_only=True)
    del payload["runner"]["fine_optimizer"]
    torch.save(payload, newest)


def garbage(run: Path) -> None:
    for path in checkpoints_of(run):
        path.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())


DAMAGED = [
    ("writes through links", "resume: metrics.jsonl a link outside", metrics_linked, [], "metrics.jsonl", None),
    ("foreign or damaged state", "resume: no .hydra/, checkpoints, another lr",
     lambda run: shutil.rmtree(run / ".hydra"), ["optim.lr=0.5"], ".hydra", None),
    ("foreign or damaged state", "resume: no .hydra/, no checkpoint",
     lambda run: (shutil.rmtree(run / ".hydra"), shutil.rmtree(run / "checkpoints")), [], ".hydra", None),
    ("foreign or damaged state", "resume: summary.json cut",
     lambda run: (run / "summary.json").write_bytes(b'{"status": "fin'), [], "summary.json", None),
    ("foreign or damaged state", "resume: summary.json a list",
     lambda run: (run / "summary.json").write_bytes(b'["finished"]'), [], "summary.json", None),
    ("foreign or damaged state", "resume: only checkpoint lacks the optimizer", without_optimizer, [], "checkpoint",
     None),
    ("foreign or damaged state", "resume: metrics.jsonl edited (cut not at a row)",
     lambda run: (run / "metrics.jsonl").write_bytes(b'{"step": 0, "note": "a row added by hand"}\n'
                                                     + (run / "metrics.jsonl").read_bytes()), [], "metrics.jsonl", None),
    ("lines that lie", "garbage checkpoint: no weights_only advice", garbage, [], "checkpoint", "weights_only"),
]


@pytest.mark.parametrize("cls, case, damage, extra, needle, never", [pytest.param(*c, id=f"{c[0]}: {c[1]}")
                                                                      for c in DAMAGED])
def test_a_resume_from_foreign_or_damaged_state_is_refused_and_changes_nothing(finished, tmp_path, cls, case, damage,
                                                                               extra, needle, never):
    run = unfinished(finished, tmp_path)
    damage(run)
    kept = {run: output_of(run)}
    if (tmp_path / "outside").exists():
        kept[tmp_path / "outside"] = output_of(tmp_path / "outside")
    line = judge(resume(tmp_path, *extra), needle, kept=kept)
    assert never is None or never not in line


def test_a_resume_whose_newest_checkpoint_is_empty_names_it_once_and_finishes_from_an_older_one(finished, tmp_path):
    run = unfinished(finished, tmp_path)
    newest = checkpoints_of(run)[-1]
    newest.write_bytes(b"")
    proc = resume(tmp_path)
    judge(proc, code=0)
    assert sum(newest.name in line and "warning" in line.lower() for line in proc.stderr.splitlines()) == 1
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"


# ---------------------------------------------------------------------------------------------
# Cases that must succeed


def test_runs_that_mix_a_lock_file_left_by_a_killed_run_does_not_block(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK_FILE).write_text("999999\n")  # killed before its first row: no one holds it
    judge(mltrain(tmp_path, f"hydra.run.dir={tmp_path / 'run'}"), code=0)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "finished"


def test_data_that_is_not_text_a_shard_folder_without_a_validation_shard_says_which_it_held_out(tmp_path):
    (tmp_path / "shards").mkdir()
    for name in ("b.bin", "a.bin", "c.bin"):
        shards.write_shard(tmp_path / "shards" / name, np.arange(5000) % 256)
    proc = mltrain(tmp_path, "data=shards", f"data.dir={tmp_path / 'shards'}", "data.tokenizer=bytes",
                   f"hydra.run.dir={tmp_path / 'run'}")
    judge(proc, code=0)
    assert "holding out its first shard, a.bin" in proc.stderr and "validation" in proc.stderr


def test_secrets_a_sweeps_env_set_token_is_recorded_nowhere(tmp_path):
    proc = tool_here("mltrain", "-m", *TOOL_SMOKE, "seed=0,1", f"+hydra.job.env_set.HF_TOKEN={SECRET}",
                     f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    judge(proc, code=0)
    assert SECRET not in proc.stdout + proc.stderr
    assert len(list((tmp_path / "sweep").glob("*/summary.json"))) == 2
    leaked = [p for p in (tmp_path / "sweep").rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == []


def test_records_overwritten_identical_runs_write_byte_identical_weights(finished, tmp_path):
    judge(mltrain(tmp_path, *CKPT, f"hydra.run.dir={tmp_path / 'again'}"), code=0)
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (finished / "model.safetensors").read_bytes()


def test_lines_that_lie_a_key_wandb_rejects_is_not_called_missing(tmp_path):
    # A server on loopback that answers every request with 404: the reachability probe passes (an error
    # page is an answer), so the key is what W&B judges, and it refuses one of the wrong form.
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the handler's name is http.server's
            self.send_error(404)

        do_POST = do_GET

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proc = mltrain(tmp_path, "logger=wandb", "logger.mode=online", f"hydra.run.dir={tmp_path / 'run'}", env={
            "WANDB_API_KEY": "short", "HOME": str(tmp_path), "WANDB_CONFIG_DIR": str(tmp_path / "wandb_config"),
            "WANDB_MODE": "online",  # CI exports WANDB_MODE=offline, which wandb's login obeys over the override
            "WANDB_BASE_URL": f"http://127.0.0.1:{server.server_address[1]}", "NO_PROXY": "127.0.0.1",
            "no_proxy": "127.0.0.1"})
    finally:
        server.shutdown()
    judge(proc, code=0)
    assert "rejected" in proc.stderr and "no W&B API key" not in proc.stderr


def leaked(root: Path, *procs: subprocess.CompletedProcess) -> list[str]:
    """Where SECRET shows: a file under root, or the console of `procs`."""
    files = [str(p) for p in root.rglob("*")
             if p.is_file() and not p.is_symlink() and SECRET.encode() in p.read_bytes()]
    return files + ["console" for p in procs if SECRET in p.stdout + p.stderr]


def test_secrets_wandb_offline_records_no_secret_in_its_config_or_metadata(tmp_path):
    proc = mltrain(tmp_path, "logger=wandb", "logger.mode=offline", f"+hydra.job.env_set.MY_SERVICE_PASSWORD={SECRET}",
                   f"hydra.run.dir={tmp_path / 'run'}", env={"HOME": str(tmp_path),
                                                              "WANDB_CONFIG_DIR": str(tmp_path / "wandb_config")})
    judge(proc, code=0)
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*")) and leaked(tmp_path, proc) == []


STOP_AFTER_FIRST_CHECKPOINT = """
import os, signal
from mltrain.training import checkpoint as _ckpt
_save = _ckpt.CheckpointFolder.save
def _save_then_ctrl_c(self, *a, **k):
    path = _save(self, *a, **k)
    os.kill(os.getpid(), signal.SIGINT)  # as if Ctrl-C came right after the first checkpoint
    return path
_ckpt.CheckpointFolder.save = _save_then_ctrl_c
"""


def test_secrets_the_printed_resume_command_and_status_reason_hold_no_secret(tmp_path):
    proc = mltrain(tmp_path, "train.checkpoint_interval=2", f"+hydra.job.env_set.WANDB_API_KEY={SECRET}",
                   f"hydra.run.dir={tmp_path / 'run'}", before=STOP_AFTER_FIRST_CHECKPOINT)
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert sum("resume with: mltrain " in line for line in proc.stderr.splitlines()) == 1
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "interrupted"
    assert leaked(tmp_path, proc) == []


def test_every_test_named_as_covering_a_case_exists():
    tests = Path(__file__).resolve().parents[1]
    named = [ref for cases in COVERED.values() for refs in cases.values() for ref in
             re.findall(r"(?:([\w/]+\.py))?::(test_\w+)", refs)]
    assert len(named) > 50
    file = None
    for path, name in named:
        file = path or file  # "::test_y" after "x.py::test_x": the same file
        assert re.search(rf"^def {name}\(", (tests / file).read_text(), flags=re.M), f"{file}::{name}"
