"""The run's settings as the method layer reads them: `RunSettings`, a Protocol that the typed `Config`
(mltrain/config.py) and the OmegaConf config Hydra composes from it both satisfy through their
attributes, so a caller hands either one over unchanged.

It names the sections every method reads: the seed, `depth_method`, the model's shape (`ModelShape`),
the steps and batches (`TrainSteps`), the fine optimizer, the coarsening, and the few multilevel keys
read outside mltrain/method/multilevel.py (`MultilevelKeys`). A method's own section is typed in that
method's module, beside its dataclass, by a Protocol that extends this one (multilevel.py
`MultilevelRun`, stacking.py `StackingRun`, layer_drop.py `LayerDropRun`, raptr.py `RaptrRun`): those
modules build on the registry, which takes `RunSettings`, so this module cannot import them.

Every member is a read-only property: the method layer never writes a setting, and a property lets a
config whose field is a subtype (the typed `Config`'s `model: GPTConfig`) satisfy it.
"""

from __future__ import annotations

from typing import Optional, Protocol

from mltrain.method.coarsening import CoarseningConfig
from mltrain.optim_settings import OptimConfig


class ModelShape(Protocol):
    """The model's fields the method layer reads: its depth (plans, checks) and the sizes of the FLOP
    formula (the cost model, the schedule control's step counts)."""

    @property
    def n_layer(self) -> int: ...

    @property
    def n_embd(self) -> int: ...

    @property
    def block_size(self) -> int: ...

    @property
    def vocab_size(self) -> Optional[int]: ...


class TrainSteps(Protocol):
    """The train section's fields the method layer reads: the run's fine steps (max_steps x budget), its
    batches and the evaluations the cost model counts."""

    @property
    def max_steps(self) -> int: ...

    @property
    def budget(self) -> float: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def grad_accum(self) -> int: ...

    @property
    def eval_interval(self) -> int: ...

    @property
    def eval_tokens(self) -> int: ...


class MultilevelKeys(Protocol):
    """The multilevel keys read outside multilevel.py: the levels (a checkpoint's scheme names them), the
    control (which method a coarsening chooses) and the coarse batch (the cost model). The whole section
    is multilevel.py `MultilevelConfig`."""

    @property
    def levels(self) -> int: ...

    @property
    def control(self) -> str: ...

    @property
    def coarse_batch_size(self) -> Optional[int]: ...


class RunSettings(Protocol):
    """A whole run's settings, as every depth method reads them (see the module docstring)."""

    @property
    def seed(self) -> int: ...

    @property
    def depth_method(self) -> str: ...

    @property
    def model(self) -> ModelShape: ...

    @property
    def train(self) -> TrainSteps: ...

    @property
    def optim(self) -> OptimConfig: ...

    @property
    def coarsening(self) -> CoarseningConfig: ...

    @property
    def multilevel(self) -> MultilevelKeys: ...
