"""Stopping on a signal: the previous handlers are restored and the signal handed on; a job SLURM
started again resumes by itself; the SLURM launcher config asks for the signal and requeues."""

import signal

import pytest
from helpers import compose_config


def test_stop_signals_restore_the_previous_handlers_and_hand_the_signal_on():
    from mltrain.training.resume import StopSignals

    seen = []
    previous = signal.signal(signal.SIGUSR1, lambda s, f: seen.append(s))  # e.g. submitit's requeue handler
    try:
        with StopSignals() as stop:
            assert not stop.requested()
            signal.raise_signal(signal.SIGUSR1)
            assert stop.requested() and stop.name == "SIGUSR1" and stop.exit_code == 138
            signal.raise_signal(signal.SIGTERM)  # already stopping: nothing more
            with pytest.raises(KeyboardInterrupt):  # but a second Ctrl-C stops at once
                signal.raise_signal(signal.SIGINT)
            assert seen == []  # the run's checkpoint comes first ...
        stop.hand_on()
        assert seen == [signal.SIGUSR1]  # ... then the handler from before gets the signal
        signal.raise_signal(signal.SIGUSR1)
        assert seen == [signal.SIGUSR1] * 2  # and it is installed again
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_job_slurm_started_again_resumes_by_itself(monkeypatch):
    from mltrain.config import resuming

    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    assert not resuming(False) and resuming(True)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # a SLURM job's first start
    assert not resuming(False)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")  # requeued (preemption, time-out, scontrol requeue)
    assert resuming(False)


def test_the_slurm_launcher_config_asks_for_the_signal_and_requeues():
    cfg = compose_config("hydra/launcher=slurm", tiny=False, hydra=True)
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher")
    assert cfg.hydra.launcher.signal_delay_s > 0 and cfg.hydra.launcher.max_num_timeout > 0


def test_a_ctrl_c_during_the_final_checkpoint_is_not_lost(tmp_path, monkeypatch):
    """A SIGINT after the last step's stop check (here: while the final checkpoint is written) used to be
    swallowed: the run finished and a sweep went on to its next job, as if nobody had pressed Ctrl-C. Now
    the run finishes, writes its results, and then stops its caller with the Ctrl-C's status."""
    import json

    from helpers import typed

    from mltrain import run as run_module
    from mltrain.training.checkpoint import CheckpointSaver

    real_save = CheckpointSaver.save

    def save_under_ctrl_c(self, *args, **kwargs):
        signal.raise_signal(signal.SIGINT)  # the run's handler takes it: no KeyboardInterrupt here
        return real_save(self, *args, **kwargs)

    monkeypatch.setattr(CheckpointSaver, "save", save_under_ctrl_c)
    cfg = typed(compose_config("train.max_steps=4", "train.eval_interval=2"))
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(run_module.RunInterrupted) as stopped:
        run_module.run(cfg, run_dir=tmp_path / "run")
    assert stopped.value.exit_code == 130
    assert "stopped by SIGINT as the run ended: it finished" in str(stopped.value)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["fine_steps"] == 4
    assert signal.getsignal(signal.SIGINT) is before  # the run's handler is gone again
