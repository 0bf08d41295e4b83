"""Checkpoints of another run, or damaged ones: refused naming the key, or passed over for an older one
in one warning, never with torch's weights_only advice; bookkeeping keys do not change a run's identity;
metrics are cut only at the row the checkpoint recorded; a permission error is not called a full disk."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import compose_config, typed

from mltrain.core import atomic
from mltrain.core.errors import ConfigError, StorageError
from mltrain.core.errors import CheckpointError
from mltrain.training import checkpoint as ckpt


def small_session(*overrides: str):
    from mltrain.run import build

    return build(typed(compose_config("train.max_steps=6", "train.eval_tokens=64", *overrides)), lambda row: None)


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory):
    """A checkpoint of a small single-level run after 3 steps, and the session that wrote it."""
    s = small_session()
    s.runner.run(should_stop=lambda: s.trainer.state.fine_steps >= 3)
    path = ckpt.save_checkpoint(tmp_path_factory.mktemp("ckpt") / "step-000003-00000003.pt", s.runner,
                                {"metrics_bytes": 0, "metrics_rows": 0})
    return path


@pytest.mark.parametrize("overrides,named", [
    (["seed=1"], "seed=0 there, 1 here"),
    (["optim.lr=0.5"], "optim.lr=0.2 there, 0.5 here"),  # the demo scale's tuned LR there
    (["train.grad_clip=0.5"], "train.grad_clip=1.0 there, 0.5 here"),
])
def test_a_checkpoint_of_another_run_of_the_same_shape_is_refused_naming_the_key(saved_checkpoint, overrides, named):
    other = small_session(*overrides)
    before = {k: v.clone() for k, v in other.model.state_dict().items()}
    with pytest.raises(CheckpointError) as err:
        ckpt.load_checkpoint(saved_checkpoint, other.runner)
    assert "is from another run" in str(err.value) and named in str(err.value)
    assert all(torch.equal(before[k], v) for k, v in other.model.state_dict().items())


def test_bookkeeping_keys_do_not_change_a_runs_identity_but_its_data_does(saved_checkpoint, tmp_path):
    same = small_session("train.progress=true", "train.checkpoint_interval=7", "logger.project=x")
    ckpt.load_checkpoint(saved_checkpoint, same.runner)  # loads
    assert same.trainer.state.fine_steps == 3
    text = tmp_path / "notes.txt"
    text.write_text("some words to train on\n" * 4000)
    on_text = small_session("data=text", f"data.path={text}")
    path = ckpt.save_checkpoint(tmp_path / "text.pt", on_text.runner)
    text.write_text("other words, the same config\n" * 4000)  # the file edited between stop and resume
    with pytest.raises(CheckpointError, match="trained on other data"):
        ckpt.load_checkpoint(path, small_session("data=text", f"data.path={text}").runner)
    a = np.arange(100_000, dtype=np.uint16)
    b = a.copy()
    b[70_000] += 1
    assert ckpt.data_fingerprint([a]) == ckpt.data_fingerprint([a.copy()]) != ckpt.data_fingerprint([a[:-1]])
    assert ckpt.data_fingerprint([a], [a]) != ckpt.data_fingerprint([a, a])


def _folder_with(tmp_path: Path, saved: Path, n: int) -> ckpt.CheckpointFolder:
    folder = ckpt.CheckpointFolder(tmp_path)
    folder.path.mkdir()
    for i in range(n):
        shutil.copy(saved, folder.path / f"step-00000{i + 1}-0000000{i + 1}.pt")
    return folder


def test_a_damaged_newest_checkpoint_is_named_once_and_an_older_one_used(saved_checkpoint, tmp_path, caplog):
    folder = _folder_with(tmp_path, saved_checkpoint, 3)
    newest, middle = folder.files()[-1], folder.files()[-2]
    newest.write_bytes(b"")
    middle.write_bytes(middle.read_bytes()[:5000])
    s = small_session()
    with caplog.at_level("WARNING"):
        path, extra = ckpt.load_latest(folder, s.runner)
    assert path == folder.path / "step-000001-00000001.pt" and s.trainer.state.fine_steps == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and f"{newest}: it is empty" in warnings[0] and str(middle) in warnings[1]
    assert newest.exists() and folder.files() == [path]  # left in place, never counted again


@pytest.mark.parametrize("damage", ["garbage", "code", "no optimizer", "not a dict"])
def test_checkpoints_that_cannot_load_are_one_line_never_torchs_weights_only_advice(saved_checkpoint, tmp_path, damage):
    folder = _folder_with(tmp_path, saved_checkpoint, 1)
    path = folder.files()[0]
    if damage == "garbage":
        path.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    elif damage == "code":
        torch.save({"x": SimpleNamespace()}, path)  # a pickled object, not tensors and plain values
    else:
        payload = torch.load(path, weights_only=True)
        if damage == "no optimizer":
            del payload["runner"]["fine_optimizer"]
        torch.save(payload if damage == "no optimizer" else [payload], path)
    s = small_session()
    before = {k: v.clone() for k, v in s.model.state_dict().items()}
    with pytest.raises(CheckpointError) as err:
        ckpt.load_latest(folder, s.runner)
    message = str(err.value)
    assert str(path) in message and "\n" not in message and "weights_only" not in message, message
    assert all(torch.equal(before[k], v) for k, v in s.model.state_dict().items())


@pytest.mark.parametrize("edit,ok", [(lambda d: d, True), (lambda d: b'{"a": 1}\n' + d, False),
                                     (lambda d: d[:-3], False), (lambda d: d + b"more\n", True)])
def test_metrics_are_cut_only_at_the_row_boundary_the_checkpoint_recorded(tmp_path, edit, ok):
    rows = b"".join(json.dumps({"step": i}).encode() + b"\n" for i in range(5))
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(edit(rows))
    before = path.read_bytes()
    if ok:
        atomic.cut_at_row(path, len(rows), 5)
        assert path.read_bytes() == rows
    else:
        with pytest.raises(ConfigError, match="changed since"):
            atomic.cut_at_row(path, len(rows), 5)
        assert path.read_bytes() == before


def test_a_permission_error_is_not_called_a_full_disk(tmp_path, monkeypatch):
    def denied(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(ckpt, "save_checkpoint", denied)
    runner = SimpleNamespace(trainer=SimpleNamespace(state=SimpleNamespace(fine_steps=1, optimizer_steps=1)))
    with pytest.raises(StorageError) as err:
        ckpt.CheckpointFolder(tmp_path).save(runner)
    assert "Permission denied: the folder does not allow" in str(err.value) and "full" not in str(err.value)
    assert "full" in atomic.full_or_denied(OSError(errno.ENOSPC, "No space left on device"))
    assert atomic.full_or_denied(OSError(errno.EIO, "Input/output error")) == "Input/output error"
