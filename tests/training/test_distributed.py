"""Data parallel, without starting ranks: ranks come from torchrun, then SLURM, then one process; a global
batch must split over ranks and micro-batches; rank variables that are not a rank, ranks without a
launcher (timed out) and a lost peer are each one line."""

from __future__ import annotations

import re
import time

import pytest
from helpers import free_port

from mltrain.config import register_configs
from mltrain.core.errors import ConfigError
from mltrain.training import distributed
from mltrain.training.distributed import World, check_divisible, world_from_env


register_configs()


def test_ranks_come_from_torchrun_then_slurm_then_default():
    assert world_from_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == World(3, 1, 4)
    torchrun_inside_slurm = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    assert world_from_env(torchrun_inside_slurm) == World(1, 1, 2)
    assert world_from_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}) == World(5, 1, 8)
    assert world_from_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) == World()
    assert world_from_env({}) == World() and not World().distributed and World().is_main


def test_global_batch_must_split_over_ranks_and_micro_batches():
    assert check_divisible(World(0, 0, 4), 2, **{"train.batch_size": 16}) is None
    problem = check_divisible(World(0, 0, 4), 2, **{"train.batch_size": 12})
    assert "train.batch_size=12" in problem and "(4) x train.grad_accum (2) = 8" in problem
    assert check_divisible(World(), 3, **{"train.batch_size": 7}) is None  # one process: config.validate's job


@pytest.mark.parametrize("env,named", [
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "RANK='abc'"), ({"RANK": "3", "WORLD_SIZE": "2"}, "RANK=3"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0"), ({"SLURM_NTASKS": "4", "SLURM_PROCID": "-1"}, "SLURM_PROCID=-1"),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"}, "LOCAL_RANK=-1"),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "2"}, "LOCAL_RANK=2"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "one"}, "LOCAL_RANK='one'"),
    ({"SLURM_NTASKS": "4", "SLURM_PROCID": "1", "SLURM_LOCALID": "-3"}, "SLURM_LOCALID=-3"),
])
def test_rank_variables_that_are_not_a_rank_name_the_bad_one(env, named):
    with pytest.raises(ConfigError, match=re.escape(named)) as caught:
        distributed.world_from_env(env)
    said = str(caught.value)
    first = re.match(r"([A-Z_]+)=", said).group(1)
    assert first == named.split("=")[0], said  # the line starts with the bad variable, not another one
    assert distributed.world_from_env({"RANK": "1", "WORLD_SIZE": "2"}) == distributed.World(1, 0, 2)


def test_ranks_without_a_launcher_say_what_is_missing_and_time_out(monkeypatch):
    for var in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="needs MASTER_ADDR and MASTER_PORT"):
        distributed.rendezvous(distributed.World(0, 0, 2))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv(distributed.RENDEZVOUS_TIMEOUT_ENV, "1")
    for rank in (0, 1):  # rank 0 waiting for the others; rank 1 waiting for rank 0
        monkeypatch.setenv("MASTER_PORT", free_port())
        started = time.monotonic()
        with pytest.raises(ConfigError, match=rf"rank {rank} of 2: the 2 ranks did not all meet .* within 1 s"):
            distributed.rendezvous(distributed.World(rank, rank, 2))
        assert time.monotonic() - started < 30
    monkeypatch.setenv(distributed.RENDEZVOUS_TIMEOUT_ENV, "0")
    with pytest.raises(ConfigError, match="MLTRAIN_RENDEZVOUS_TIMEOUT_S='0'"):
        distributed.rendezvous_timeout()


def test_a_lost_peer_is_recognised_only_in_a_process_group(monkeypatch):
    gloo = RuntimeError("[/x/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:1: Connection reset by peer. More")
    assert distributed.lost_peer(gloo) is None  # no group: not a lost peer
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)  # as in rank 1 of a job of 2
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    line = distributed.lost_peer(gloo)
    assert line.startswith("rank 1 of 2 lost contact with the other ranks (Read error [127.0.0.1]:1: Connection "
                           "reset by peer)")
    assert distributed.lost_peer(ValueError("shapes differ")) is None
    with pytest.raises(distributed.RanksLost):
        with distributed.one_line_when_a_rank_is_lost():
            raise gloo
