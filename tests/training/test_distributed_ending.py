"""How a rank's process ends (training/distributed.py, "How a rank's process ends"): a gloo thread that
still needs Python while the interpreter tears itself down aborts the process (SIGABRT, "terminate called
without an active exception", as CI saw once after a torchrun run had ended); `end_process` ends it
before that teardown, keeping what a normal exit does (the atexit handlers, the buffered output) and its
status. `ends_the_process` gives each way a rank's work can end its exit status."""

import os
import signal
import subprocess
import sys

import pytest

from mltrain.training import distributed

# Two gloo groups of one job in one process (ranks 0 and 1 on a HashStore): rank 0's all_reduce waits for
# rank 1's, so its future completes on a gloo worker thread, which runs the Python callback attached
# before. The callback sleeps (the GIL released) while the main thread goes on to exit: the worker wants
# the GIL back during the interpreter's teardown. The groups stay referenced to the end, as the one a
# DDP model has used does after destroy_process_group.
LATE_GLOO_THREAD = """
import atexit, sys, threading, time
from datetime import timedelta
import torch
import torch.distributed as dist

store, groups = dist.HashStore(), [None, None]
def join(rank):
    groups[rank] = dist.ProcessGroupGloo(store, rank, 2, timedelta(seconds=60))
joining = [threading.Thread(target=join, args=(rank,)) for rank in (0, 1)]
for thread in joining:
    thread.start()
for thread in joining:
    thread.join()
work = groups[0].allreduce([torch.ones(4)])
work.get_future().then(lambda fut: time.sleep(1.0))
groups[1].allreduce([torch.ones(4)]).wait()
atexit.register(print, "atexit handler ran")
print("the run's last line")  # stdout is a pipe: block-buffered, not flushed yet
if sys.argv[1] == "end_process":
    from mltrain.training.distributed import end_process
    end_process(3)
sys.exit(3)
"""


def ending(tmp_path, how: str) -> subprocess.CompletedProcess:
    script = tmp_path / "late_gloo_thread.py"
    script.write_text(LATE_GLOO_THREAD)
    return subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_a_gloo_thread_needing_python_at_exit_aborts_a_normal_exit_but_not_end_process(tmp_path):
    plain = ending(tmp_path, "sys.exit")
    # the hazard itself (torch 2.13 on Python 3.11): the exit status lost to SIGABRT after everything ran
    assert plain.returncode == -signal.SIGABRT, (plain.returncode, plain.stderr[-2000:])
    assert plain.stdout == "the run's last line\natexit handler ran\n"
    ended = ending(tmp_path, "end_process")
    assert ended.returncode == 3, ended.stderr[-2000:]
    assert ended.stdout == "the run's last line\natexit handler ran\n"  # flushed, and the atexit handler ran
    assert "terminate called" not in ended.stderr and "Fatal Python error" not in ended.stderr


class Ended(Exception):
    """Raised instead of os._exit, so the status `ends_the_process` chose can be read in this process."""


@pytest.fixture
def ended_with(monkeypatch):
    met = []
    monkeypatch.setattr(distributed, "barrier", lambda: met.append("barrier"))
    monkeypatch.setattr(distributed, "shutdown", lambda: met.append("shutdown"))

    def end_process(code):
        raise Ended(code, list(met))

    monkeypatch.setattr(distributed, "end_process", end_process)

    def run(block):
        met.clear()
        with pytest.raises(Ended) as ended:
            with distributed.ends_the_process():
                block()
        return ended.value.args

    return run


def test_a_rank_ends_with_its_work_status_after_the_group_is_shut_down(ended_with, capsys):
    # returned: every rank meets at the barrier before the group goes (rank 0 was still writing)
    assert ended_with(lambda: None) == (0, ["barrier", "shutdown"])
    assert ended_with(lambda: sys.exit(2)) == (2, ["shutdown"])  # mltrain's one-line errors
    assert ended_with(lambda: sys.exit(None)) == (0, ["shutdown"])
    assert ended_with(lambda: sys.exit("error: said by sys.exit")) == (1, ["shutdown"])
    assert capsys.readouterr().err == "error: said by sys.exit\n"  # as Python prints it

    def crash():
        raise ValueError("something unforeseen")

    assert ended_with(crash) == (1, ["shutdown"])
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "ValueError: something unforeseen" in err


def test_a_ctrl_c_goes_on_up_to_the_console_after_the_group_is_shut_down(monkeypatch):
    met = []
    monkeypatch.setattr(distributed, "shutdown", lambda: met.append("shutdown"))
    monkeypatch.setattr(distributed, "end_process", lambda code: met.append(f"ended {code}"))

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with distributed.ends_the_process():
            interrupted()
    assert met == ["shutdown"]
