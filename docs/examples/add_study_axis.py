"""A new study axis in one file: `compute`, the training compute C = 6·N·D of each rung (N parameters, D
training tokens), so that a ladder's report says how the saving changes with compute rather than with
parameters. Run it from any folder: `python docs/examples/add_study_axis.py` (CPU, seconds; trains nothing).

A ladder axis is one registration in mltrain/tools/study/axes.py's registry: `@ladder_axis` on the
function that reads a rung's value from its size (compose.ScaleSize: parameters, steps, tokens per step,
depth, width), with its name, the keys its rungs may set differently (beyond them only what follows from
the axis: the steps, warm-up and coarse steps) and how the report names it. The schema's check, the
rungs' check and the ladder report read the registry. The example registers the axis, writes a study
of its own on it (`mine/study/compute_smoke.yaml`, starting from the shipped `smoke`) and runs the
study's checking and planning stage, `stages.prepare`: every setting composed and validated, each rung's
value read from its composed config, the rungs checked to vary the axis alone. No run is started.
"""

from pathlib import Path

from mltrain.core.errors import ConfigError
from mltrain.tools.study import compose, schema, stages
from mltrain.tools.study.axes import ladder_axis
from mltrain.tools.study.cli import compose_study
from mltrain.tools.study.plan import tuning_sweeps

AXIS = "compute"


# the model's size may change; the token budget follows from it (train.max_steps)
@ladder_axis(name=AXIS, keys=("model",), words="training compute", symbol="compute",
             title="training compute C = 6 N D (FLOPs)", unit="FLOPs")
def compute(size) -> float:
    return 6.0 * size.n_params * size.max_steps * size.tokens_per_step  # 6 N D, D = steps x batch x context


# A study of one's own: the shipped smoke study, its rungs read along compute (the wider rung trains on
# twice the tokens per parameter, which moves its compute further).
Path("mine/study").mkdir(parents=True, exist_ok=True)
Path("mine/study/compute_smoke.yaml").write_text("""# @package _global_
defaults: [smoke]
name: compute_smoke
ladder_axis: compute
ladder:
  d32: {tokens_per_param: 0.2}
""")
MINE = [f"hydra.searchpath=[file://{Path('mine').resolve()}]", f"dir={Path('studies/compute_smoke').resolve()}"]
composed = compose_study(["study=compute_smoke", *MINE])
schema.check(composed)
cfg = compose.typed_study(composed)  # the stages take the typed study config, as mltrain-study hands it
study = stages.prepare(cfg)  # bad input stops here, in one line, before any run

values = {name: size.on_axis(AXIS) for name, size in study.sizes.items()}
assert values["d32"] > values["d16"] > 0 and not Path("studies").exists()  # planned, nothing written
for name, size in study.sizes.items():
    print(f"{name}: {size.n_params:,} parameters, {size.max_steps} steps, compute {values[name]:.3g} FLOPs")
    for sweep in tuning_sweeps(cfg, study.layout, name, size.max_steps):
        print(f"  tune {sweep.arm}: {len(sweep.runs())} runs, e.g. {sweep.runs()[0].dirname_full}")

# The checks that guard the shipped axes guard this one: a rung that also changes the batch is refused.
wider = "ladder.d32.overrides=['model.n_embd=32','model.n_head=2','schedule.warmup_steps=2','train.batch_size=8']"
try:
    stages.prepare(compose.typed_study(compose_study(["study=compute_smoke", *MINE, wider])))
except ConfigError as err:
    print(f"refused: {err}")
    assert "also differ in train.batch_size" in str(err), err
else:
    raise AssertionError("a compute ladder whose rungs also differ in their batch was accepted")
