"""The tools around a run at their edges: partial results are said to be partial (export and sample of
an interrupted run warn, and the exported config records it); errors name the key, the file and the
value (a study yaml, a malformed override) and labels cannot break comparison.md's tables; W&B online
without a network goes offline at once with one line; a Ctrl-C while torch imports is one line."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from helpers import TOOL_SMOKE, edited_copy, fake_runs, made_once, refused, smoke_run, tool, tool_here

# ---------------------------------------------------------------------------------------------
# Partial results said as partial


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    return made_once(tmp_path_factory, "smoke_run", smoke_run) / "run"  # once for the whole suite


def with_summary(run: Path, tmp_path: Path, **fields) -> Path:
    return edited_copy(run, tmp_path / "run", "summary.json", lambda summary: summary.update(fields))


@pytest.mark.parametrize("fields, status, says", [
    ({"status": "interrupted", "fine_steps": 3}, "interrupted", "interrupted run (stopped at fine step 3 of 6)"),
    ({"final_val_loss": float("nan")}, "diverged", "final held-out loss is nan"),
    ({"skipped_steps": 2}, "finished", "skipped 2 step(s)"),
])
def test_export_and_sample_say_when_the_weights_are_not_a_finished_runs(finished, tmp_path, fields, status, says):
    run = with_summary(finished, tmp_path, **fields)
    exported = tool_here("mltrain-export", str(run), str(tmp_path / "hf"), cwd=tmp_path)
    assert exported.returncode == 0 and "Traceback" not in exported.stderr, exported.stderr
    warned = [line for line in exported.stderr.splitlines() if line.startswith("mltrain-export: warning:")]
    assert len(warned) == 1 and says in warned[0]
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["mltrain_run_status"] == status and says in config["mltrain_run_note"]
    sampled = tool_here("mltrain-sample", str(run), "--max-new-tokens", "3", cwd=tmp_path)
    assert sampled.returncode == 0 and sum(line.startswith("mltrain-sample: warning:") for line in
                                           sampled.stderr.splitlines()) == 1


@pytest.mark.parametrize("summary, status", [(True, "finished"), (False, "unknown")])
def test_a_finished_run_or_weights_without_a_summary_export_without_a_word(finished, tmp_path, summary, status):
    run = with_summary(finished, tmp_path)
    if not summary:  # weights saved by a script: they speak for themselves
        (run / "summary.json").unlink()
    exported = tool_here("mltrain-export", str(run), str(tmp_path / "hf"), cwd=tmp_path)
    assert exported.returncode == 0 and "warning" not in exported.stderr
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["mltrain_run_status"] == status and "mltrain_run_note" not in config


def _summary_as(run: Path, how: str) -> None:
    path = run / "summary.json"
    path.unlink()
    if how == "a folder":
        path.mkdir()
    else:
        path.write_bytes({"not json": b'{"status": "finished", ', "a list": b"[1, 2]", "not utf-8": b"\xff\xfe{}"}[how])


@pytest.mark.parametrize("how, why", [("not json", "not JSON"), ("a list", "holds a JSON list, not an object"),
                                      ("a folder", "Is a directory"), ("not utf-8", "not JSON")])
def test_a_summary_that_cannot_be_read_is_said_and_recorded_in_the_export(finished, tmp_path, how, why):
    run = with_summary(finished, tmp_path)
    _summary_as(run, how)
    exported = tool_here("mltrain-export", str(run), str(tmp_path / "hf"), cwd=tmp_path)
    assert exported.returncode == 0 and "Traceback" not in exported.stderr, exported.stderr
    warned = [line for line in exported.stderr.splitlines() if "warning" in line.lower()]
    assert len(warned) == 1 and warned[0].startswith("mltrain-export: warning: ") and why in warned[0], warned
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["mltrain_run_status"].startswith("unknown (summary.json unreadable: ") and why in config["mltrain_run_status"]
    if how == "a list":  # sample says it too, and still samples
        sampled = tool_here("mltrain-sample", str(run), "--max-new-tokens", "3", cwd=tmp_path)
        assert sampled.returncode == 0 and sampled.stdout, sampled.stderr
        assert [line for line in sampled.stderr.splitlines() if "warning" in line.lower()] == [
            line for line in sampled.stderr.splitlines() if line.startswith("mltrain-sample: warning: ") and why in line]
        assert sum(line.startswith("mltrain-sample: warning: ") for line in sampled.stderr.splitlines()) == 1


@pytest.mark.parametrize("edit, says", [
    ({"model": {"vocab_size": 100}}, "its tokenizer 'bytes' has 256 tokens but the model's embedding has 100 rows"),
    ({"tokenizer": 7}, "tokenizer"),  # sample names it as an unknown tokenizer, export as no name at all
    ({"eot_token": 4096}, "eot_token is 4096, not a token of the model's 256-row vocabulary"),
])
def test_a_tokenizer_that_does_not_fit_the_weights_is_one_line(tmp_path, edit, says):
    from helpers import saved_run

    run, _ = saved_run(tmp_path, vocab_size=edit.get("model", {}).get("vocab_size", 256))
    info = json.loads((run / "model.json").read_text())
    info.update({k: v for k, v in edit.items() if k != "model"})
    (run / "model.json").write_text(json.dumps(info))
    for name, args in (("mltrain-sample", ["--prompt", "hi", "--max-new-tokens", "2"]), ("mltrain-export", [str(tmp_path / "hf")])):
        line = refused(tool_here(name, str(run), *args, cwd=tmp_path), says)
        assert line.startswith(f"{name}: error: {run / 'model.json'}: ") and ("7" in line or "7" not in str(edit))
    assert not (tmp_path / "hf").exists()


# ---------------------------------------------------------------------------------------------
# Errors that name the key, the file and the value


STUDIES = {
    "badkey": "arms:\n  single:\n    gird: {optim.lr: [1]}\n",
    "badinterp": "common: [scale=smoke, 'train.eval_interval=${nope}']\n",
    "badyaml": "arms: {single: [\n",
    "badtype": "seeds: [1, two]\n",
}


@pytest.mark.parametrize("name, says", [
    ("badkey", ["In 'study/badkey': arms.single.gird: key 'gird' not in 'ArmConfig'; did you mean arms.single.grid?",
                "badkey.yaml"]),
    ("badinterp", ["Interpolation key 'nope' not found", "key common[1]", "badinterp.yaml"]),
    ("badyaml", ["expected the node content", "badyaml.yaml", "line 5"]),
    ("badtype", ["two", "seeds", "badtype.yaml"]),
])
def test_an_error_in_a_study_yaml_names_the_key_and_the_file(tmp_path, name, says):
    own = tmp_path / "mine" / "study"
    own.mkdir(parents=True)
    (own / f"{name}.yaml").write_text(f"# @package _global_\ndefaults: [smoke]\nname: {name}\n{STUDIES[name]}")
    line = refused(tool_here("mltrain-study", f"study={name}", f"dir={tmp_path / 'study'}",
                             f"hydra.searchpath=[file://{tmp_path / 'mine'}]", cwd=tmp_path), says[0])
    assert all(s in line for s in says), line
    assert not line.rstrip().endswith("while composing config:")
    assert not (tmp_path / "study").exists()


def test_a_malformed_override_is_named_as_itself(tmp_path):
    line = refused(tool_here("mltrain-study", "study=smoke", "common=[scale=smoke,hydra.job.chdir=true]", cwd=tmp_path),
                   "cannot parse override 'common=[scale=smoke,hydra.job.chdir=true]'")
    assert "no viable alternative" in line


@pytest.mark.parametrize("label", ["coarsening=evenodd,+data.path=/x|y", "coarsening=evenodd,+data.path=/x\ny",
                                   "coarsening=evenodd,+data.path=/x#y", "coarsening=evenodd,+note=a|b\r\n# c"])
def test_a_label_cannot_break_the_tables_of_comparison_md(tmp_path, label):
    runs = fake_runs(tmp_path, ("default", label))
    proc = tool_here("mltrain-compare", str(runs), "--out", str(tmp_path / "r"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "r" / "comparison.md").read_text()
    assert not [line for line in md.splitlines() if line.startswith("|") and not line.rstrip().endswith("|")]
    tables = re.findall(r"((?:^\|.*\|$\n?)+)", md, flags=re.M)
    assert tables
    for table in tables:
        widths = {len(re.split(r"(?<!\\)\|", row)) for row in table.strip().splitlines()}
        assert len(widths) == 1, table  # every row of a table has its header's cells
    assert not any(line.startswith("#") and "c`" in line for line in md.splitlines())
    saved = json.loads((tmp_path / "r" / "comparison.json").read_text())
    assert any(c["label"] == label for c in saved["configurations"])  # the JSON keeps the label as it is


# ---------------------------------------------------------------------------------------------
# Stalls and noise at the edges


def test_wandb_online_without_a_network_goes_offline_at_once_in_one_line(tmp_path):
    env = {"WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567", "WANDB_MODE": "online", "HOME": str(tmp_path),
           "WANDB_CONFIG_DIR": str(tmp_path / "wandb_config"), "HTTPS_PROXY": "http://127.0.0.1:9",
           "https_proxy": "http://127.0.0.1:9", "NO_PROXY": "", "no_proxy": ""}
    proc = tool("mltrain", *TOOL_SMOKE, "logger=wandb", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines() if "cannot reach the W&B server" in line]
    assert len(said) == 1 and "127.0.0.1:9" in said[0] and "offline" in said[0]
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*"))


def test_the_server_probe_is_bounded(monkeypatch):
    import socket

    from mltrain.runs import wandb_mirror

    class FakeWandb:
        class Settings:
            base_url = "https://api.example.invalid"

    released = threading.Event()

    def hang(*args, **kwargs):  # a connect that never answers, until the test lets the probe thread end
        released.wait(30)
        raise TimeoutError("released by the test")

    monkeypatch.setattr(socket, "create_connection", hang)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    for key in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(key, raising=False)
    try:
        reason = wandb_mirror._server_problem(FakeWandb, timeout=0.2)
    finally:
        released.set()  # the probe thread ends quietly now, not 30 s later in another test
    assert reason.startswith("cannot reach the W&B server https://api.example.invalid within 0.2 s")


@pytest.fixture
def silent_server():
    """A W&B server on loopback that accepts connections and never answers: its URL."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted, stop = [], threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])  # held open, never read or answered
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_w_and_b_server_that_never_answers_is_one_line_and_the_run_goes_on_offline(tmp_path, silent_server):
    env = {"WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567", "WANDB_MODE": "online", "HOME": str(tmp_path),
           "WANDB_CONFIG_DIR": str(tmp_path / "wandb_config"), "WANDB_BASE_URL": silent_server,
           "HTTPS_PROXY": "", "https_proxy": "", "HTTP_PROXY": "", "http_proxy": ""}
    proc = tool("mltrain", *TOOL_SMOKE, "logger=wandb", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, env=env,
                timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines() if "W&B" in line and "WARNING" in line]
    assert len(said) == 1, said
    assert f"cannot reach the W&B server {silent_server}" in said[0] and "offline" in said[0]
    assert f"wandb sync {tmp_path / 'run' / 'wandb'}" in said[0]
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*")) and (tmp_path / "run" / "summary.json").exists()
    assert not list((tmp_path / "run" / "wandb").glob("run-*"))  # no online run was begun, to wait on at exit


def test_the_probe_counts_an_answer_not_a_connection(silent_server):
    import http.server

    from mltrain.runs import wandb_mirror

    class Quiet(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # an error page is an answer: the server is there
            self.send_error(404)

        def log_message(self, *args):
            pass

    answering = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=answering.serve_forever, daemon=True)
    thread.start()

    class FakeWandb:
        class Settings:
            base_url = ""

    try:
        for url, answers in ((silent_server, False), (f"http://127.0.0.1:{answering.server_address[1]}", True)):
            FakeWandb.Settings.base_url = url
            with pytest.MonkeyPatch.context() as mp:
                mp.delenv("WANDB_BASE_URL", raising=False)
                for key in ("HTTP_PROXY", "http_proxy"):
                    mp.delenv(key, raising=False)
                reason = wandb_mirror._server_problem(FakeWandb, timeout=0.5)
            assert (reason is None) == answers, reason
            if not answers:
                assert reason.startswith(f"cannot reach the W&B server {url} within 0.5 s")
    finally:
        answering.shutdown()
        answering.server_close()


def test_a_finish_that_hangs_is_left_behind_with_one_line(tmp_path, monkeypatch, caplog):
    from mltrain.runs import wandb_mirror

    released = threading.Event()

    class HangingRun:
        dir = str(tmp_path / "run" / "wandb" / "run-x" / "files")

        def finish(self, exit_code):
            released.wait(30)

    monkeypatch.setattr(wandb_mirror, "FINISH_MIN_S", 0.2)
    mirror = wandb_mirror.WandbMirror(tmp_path / "run", resuming=False)
    mirror.run, mirror.mode, mirror.waited = HangingRun(), "online", wandb_mirror.ONLINE_WAIT_S  # start used it all
    try:
        with caplog.at_level("WARNING", logger="mltrain.runs.tracking"):
            mirror.finish(0)
    finally:
        released.set()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "did not end within 0.2 s" in said[0], said
    assert f"wandb sync {tmp_path / 'run' / 'wandb' / 'run-x'}" in said[0] and mirror.run is None


# The tool starts as from a terminal, where Ctrl-C is handled: a suite started in the background of a
# non-interactive shell (`bash -c '... &'`) inherits SIGINT ignored, and the tool rightly keeps it so.
CTRL_C_AT_TORCH = """
import importlib.abc, os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
class _CtrlCAtTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)  # as if Ctrl-C came while torch imports
        return None
sys.meta_path.insert(0, _CtrlCAtTorch())
"""


@pytest.mark.parametrize("name, args", [("mltrain", [*TOOL_SMOKE, "hydra.run.dir={tmp}/run"]),
                                        ("mltrain-sample", ["{tmp}/none"]), ("mltrain-export", ["{tmp}/none", "{tmp}/o"]),
                                        ("mltrain-study", ["study=smoke", "dir={tmp}/study"])])
def test_ctrl_c_while_torch_imports_is_one_line(tmp_path, name, args):
    proc = tool(name, *[a.replace("{tmp}", str(tmp_path)) for a in args], cwd=tmp_path, before=CTRL_C_AT_TORCH)
    line = refused(proc, f"{name}: interrupted:", code=130)
    assert "Ctrl-C" in line
    assert not [p for p in tmp_path.iterdir() if p.name in ("run", "study", "o")]
