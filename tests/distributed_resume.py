"""Run by tests/test_distributed.py under torchrun: build a run, optionally restore a checkpoint, train
until `stop_at` optimizer steps (or to the end), and let rank 0 write the runner's state."""

import json
import sys

from hydra import compose, initialize_config_module

from mltrain import distributed
from mltrain.checkpoint import load_checkpoint, save_checkpoint
from mltrain.config import register_configs
from mltrain.run import build

overrides, stop_at, load, save = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
register_configs()
with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
    cfg = compose("config", overrides=overrides)
session = build(cfg, lambda row: None)
state = session.trainer.state
if load:
    load_checkpoint(load, session.runner)
session.runner.run(should_stop=lambda: stop_at >= 0 and
                   state.fine_steps + state.coarse_steps + state.control_steps >= stop_at)
if distributed.world_from_env().is_main:
    save_checkpoint(save, session.runner)
distributed.barrier()
distributed.shutdown()
