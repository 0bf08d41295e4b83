"""A new coarsening scheme in one file: `halves`, whose coarse models are the shallow and the deep half of
the network (for 4 blocks: A = blocks 0, 1 and B = blocks 2, 3), instead of the paper's even and odd
blocks. Run it from any folder: `python docs/examples/add_scheme.py` (CPU, seconds).

It registers the scheme, gives it a preset (`coarsening=halves`, a yaml on Hydra's search path), composes
a run with it as `mltrain coarsening=halves ...` would, trains a tiny multilevel run and checks that the
coarse phases ran the halves' blocks.
"""

import json
from pathlib import Path

from hydra import compose, initialize_config_module

from mltrain.config import register_configs, typed
from mltrain.method.coarsening import Groups, Scheme, register_scheme
from mltrain.run import run


@register_scheme
class Halves(Scheme):
    """k coarse models, each a contiguous slice of the depth; a coarse block stands for itself alone, so
    training a coarse model updates its fine blocks in place and prolongation has nothing to mix."""

    name = "halves"  # coarsening.scheme=halves
    uniform_steps = False  # a slice covers part of the depth: coarsening.step_scale=stride is refused
    asked: list[list[int]] = []  # the fine blocks each coarse model was built from (for the check below)

    def partition(self, n_parent: int, seed) -> list[Groups]:
        size = n_parent // self.k
        return [[(i,) for i in range(r * size, (r + 1) * size)] for r in range(self.k)]

    def coarse_blocks(self, parent_blocks, groups):
        Halves.asked.append([g[0] for g in groups])
        return super().coarse_blocks(parent_blocks, groups)


# The preset a user would ship beside the class: conf/coarsening/halves.yaml in a folder of their own.
Path("mine/coarsening").mkdir(parents=True, exist_ok=True)
Path("mine/coarsening/halves.yaml").write_text("name: halves\nscheme: halves\nk: 2\n")

TINY = ["scale=smoke", "model.n_layer=4", "train.max_steps=8", "multilevel.n_cycles=2", "multilevel.coarse_steps=2",
        "train.progress=false", "device=cpu"]
register_configs()
with initialize_config_module(config_module="mltrain.conf", version_base="1.3"):
    cfg = compose("config", overrides=["coarsening=halves", *TINY, f"hydra.searchpath=[file://{Path('mine').resolve()}]"])
run(typed(cfg), run_dir="runs/halves")  # the composed config typed once, as the CLI does

summary = json.loads(Path("runs/halves/summary.json").read_text())
rows = [json.loads(line) for line in Path("runs/halves/metrics.jsonl").read_text().splitlines()]
coarse = [r for r in rows if r.get("phase") == "coarse"]
assert summary["status"] == "finished" and summary["coarsening"] == "halves", summary
assert sorted(set(map(tuple, Halves.asked))) == [(0, 1), (2, 3)], Halves.asked  # the shallow and the deep half
assert {r["coarse_model"] for r in coarse} == {0, 1} and {r["blocks"] for r in coarse} == {2.0}
assert summary["coarse_steps"] == 2 * 2 * 2  # cycles x coarse models x steps
print(f"halves: coarse models {sorted(set(map(tuple, Halves.asked)))} trained {summary['coarse_steps']} steps; "
      f"held-out loss {summary['initial_val_loss']:.3f} -> {summary['final_val_loss']:.3f}")
