"""torch.compile for a run: whether it compiles (train.compile), how the model is compiled, how many graphs
it may make, and noticing a compile.

`train.compile=auto` (the default) compiles on CUDA, where a step of eager kernels is bound by the host
launching them, and not on a CPU, where compiling costs minutes and gains little; `true`/`false` force it.
The value itself is read by training/settings.py `compile_setting`, beside the train section, so that
config.validate checks it without torch.

One graph per shape: a call of the compiled model is guarded on how many blocks it runs, not on which
modules they are, so every view of one depth shares a graph, every later cycle reuses it, and
a sub-path method makes one per path length (a per-step Euler step 1/p reaches the graph as a tensor:
training/trainer.py). Dynamo's recompile limit is raised to what a plan of this depth can need, and
reaching it is an error (one line, CompileLimitError) instead of dynamo's silent fall-back to eager
kernels for the rest of the run. `MLTRAIN_COMPILE_BACKEND` names another backend (the tests use
`aot_eager`, which compiles in seconds on a CPU).
"""

from __future__ import annotations

import os
from typing import Any, Literal, Optional

import torch

from mltrain.core.errors import MltrainError
from mltrain.training.settings import compile_setting

BACKEND_ENV = "MLTRAIN_COMPILE_BACKEND"


class CompileLimitError(MltrainError):
    """The compiled model needed more graphs than dynamo's recompile limit allows."""


def compiles(value: Any, device: torch.device) -> bool:
    """Whether a run with train.compile=`value` on `device` compiles: auto is on for CUDA only."""
    setting = compile_setting(value)
    return device.type == "cuda" if setting is None else setting


def graph_limit(n_layer: int) -> int:
    """Graphs one compiled model may need in any plan of an n_layer model: a train graph per depth a view
    can have (0..n_layer blocks), the same with per-call Euler steps, evaluation, with room to spare."""
    return 2 * (n_layer + 1) + 8


def compile_model(model: torch.nn.Module, n_layer: int) -> None:
    """Compile `model` in place (its __call__), fresh: earlier runs of this process (a sweep worker runs
    several) leave no graphs to count against its limit."""
    import torch._dynamo

    torch._dynamo.reset()
    config = torch._dynamo.config
    limit = graph_limit(n_layer)
    if hasattr(config, "recompile_limit"):
        config.recompile_limit = max(config.recompile_limit, limit)
        config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * limit)
    else:  # torch before 2.6
        config.cache_size_limit = max(config.cache_size_limit, limit)
    if hasattr(config, "fail_on_recompile_limit_hit"):
        config.fail_on_recompile_limit_hit = True
    model.compile(**compile_options())


def compile_options() -> dict:
    """torch.compile's arguments: static shapes, the backend of MLTRAIN_COMPILE_BACKEND if set."""
    options: dict[str, Any] = {"dynamic": False}
    if os.environ.get(BACKEND_ENV):
        options["backend"] = os.environ[BACKEND_ENV]
    return options


class CompileWatch:
    """Dynamo's count of graphs compiled so far (0 when the run does not compile), so a train row can say
    that it contains a compile; and the one line for a run past the recompile limit: inside
    `with watch:`, dynamo's error for it becomes CompileLimitError (a class, not a generator: the step
    enters it every time)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._counters = None
        if enabled:
            from torch._dynamo.utils import counters

            self._counters = counters

    def count(self) -> int:
        return self._counters["stats"]["unique_graphs"] if self._counters is not None else 0

    def __enter__(self) -> "CompileWatch":
        return self

    def __exit__(self, kind: Any, err: Optional[BaseException], tb: Any) -> Literal[False]:
        line = None if err is None else self.limit_hit(err)
        if line is not None:
            raise CompileLimitError(line) from None
        return False

    def limit_hit(self, err: BaseException) -> Optional[str]:
        """The one line for dynamo's recompile limit reached, or None for any other error."""
        if not self.enabled or type(err).__name__ not in ("FailOnRecompileLimitHit", "RecompileLimitExceeded"):
            return None
        config = torch._dynamo.config
        limit = getattr(config, "recompile_limit", getattr(config, "cache_size_limit", "?"))
        return (f"the compiled model needed more than {limit} graphs (dynamo's recompile limit): something "
                f"changes from step to step that should not (TORCH_LOGS=recompiles says what); train.compile=false "
                f"trains without compiling")
