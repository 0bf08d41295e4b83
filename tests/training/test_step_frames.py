"""One legible step: from the `mltrain` console entry point to `optimizer.step()` the stack holds at most
five of mltrain's own frames (console.train_main, cli.hydra_task, run.run, PlanRunner.run,
Trainer.train_step); Hydra's, contextlib's and torch's frames between them are not counted."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import pytest
from torch.optim.optimizer import register_optimizer_step_pre_hook
from helpers import ML, TINY, read_rows

import mltrain
from mltrain import console

PACKAGE = Path(mltrain.__file__).resolve().parent
MOST_FRAMES = 5


def ours(stack: traceback.StackSummary) -> list[str]:
    """The frames of `stack` whose code is in the mltrain package, outermost first, as `file:function`."""
    return [f"{Path(f.filename).resolve().relative_to(PACKAGE)}:{f.name}" for f in stack
            if Path(f.filename).resolve().is_relative_to(PACKAGE)]


def test_ours_counts_only_the_frames_of_the_package():
    def inner() -> traceback.StackSummary:
        return traceback.extract_stack()

    stack = inner()
    assert ours(stack) == []  # this file and pytest's are not mltrain's
    assert ours(traceback.StackSummary.from_list([(str(PACKAGE / "run.py"), 1, "run", None)])) == ["run.py:run"]


@pytest.mark.parametrize("method", [[], ML], ids=["single", "multilevel"])
def test_the_optimizer_step_is_at_most_five_of_our_frames_below_the_console(tmp_path, monkeypatch, method):
    stacks: list[list[str]] = []

    def capture(optimizer, args, kwargs) -> None:
        stacks.append(ours(traceback.extract_stack()))

    run_dir = tmp_path / "run"
    argv = ["mltrain", *TINY, *method, "train.max_steps=6", f"hydra.run.dir={run_dir}"]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.chdir(tmp_path)
    handle = register_optimizer_step_pre_hook(capture)
    try:
        with pytest.raises(SystemExit) as ended:
            console.train_main()
    finally:
        handle.remove()
    assert ended.value.code == 0
    assert any("train/loss" in row for row in read_rows(run_dir))  # a real run: it trained and wrote rows
    assert stacks, "no optimizer step was taken"
    deepest = max(stacks, key=len)
    assert deepest[0] == "console.py:train_main" and deepest[-1] == "training/trainer.py:train_step", deepest
    assert len(deepest) <= MOST_FRAMES, " -> ".join(deepest)
