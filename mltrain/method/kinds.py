"""The vocabularies of what runs: the kind of a run, of a phase of its plan, and of an optimizer step;
the names of the models a plan trains.

Torch-free on purpose: the tools that read run files (mltrain-compare, mltrain-study) use these names
without importing the training code. A run kind is a registered depth method's name (RunKind); step
kinds and the built-in phase kinds are `Choice`s (str Enums). Each compares equal to, and is written
to summary.json or metrics.jsonl as, its plain string. The phase kinds are an open set: a plan's phase
may name a kind of its own (any other string), which the method that plans it gives a handler
(training/runner.py `phase_handler`).
"""

from __future__ import annotations

from typing import Iterator

from mltrain.core.choice import Choice
from mltrain.method.registry import method_names


class _RegisteredKinds(type):
    """RunKind's members are the registered depth methods (method/registry.py), in registration order:
    `RunKind.single`, `list(RunKind)`, `"raptr" in RunKind`."""

    def __iter__(cls) -> Iterator["RunKind"]:
        return iter([cls(name) for name in method_names()])

    def __len__(cls) -> int:
        return len(method_names())

    def __contains__(cls, value: object) -> bool:
        return str(value) in method_names()

    def __getattr__(cls, name: str) -> "RunKind":
        if name in method_names():
            return cls(name)
        raise AttributeError(f"{name!r} is not a registered depth method (mltrain/method/registry.py)")


class RunKind(str, metaclass=_RegisteredKinds):
    """What a run trains: the name of its depth method, as summary.json's `run_kind` records it. Each
    registered method is one kind (single-level training is the baseline every other kind is measured
    against); `RunKind(text)` refuses a name no method has (ValueError). One object per kind, as an
    Enum's members: `run_kind(cfg) is RunKind.single`."""

    _members: dict[str, "RunKind"] = {}

    def __new__(cls, value: object) -> "RunKind":
        text = str(value)
        if text not in method_names():
            raise ValueError(f"{text!r} is not a run kind (the registered depth methods: {', '.join(method_names())})")
        if text not in cls._members:
            cls._members[text] = super().__new__(cls, text)
        return cls._members[text]

    @property
    def value(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"RunKind({str(self)!r})"


class PhaseKind(Choice):
    """The built-in kinds of an entry of a run's plan (a method may add others, by name)."""

    train = "train"  # optimizer steps of one model (or view)
    restrict = "restrict"  # initialise a coarse model from its parent
    diagnose = "diagnose"  # coarse vs parent loss and gradient agreement, measured, not trained
    prolong = "prolong"  # carry a coarse model's weights back into its parent
    evaluate = "evaluate"  # held-out loss of the fine model
    grow = "grow"  # copy the fine model's first blocks into deeper ones (progressive stacking)


class StepKind(Choice):
    """The built-in kinds of optimizer step: which count a step adds to (TrainState.steps, one mapping by
    kind) and which train rows it is averaged in. An open set: a method's phase may count its steps as a
    kind of its own (any other string), counted and reported as these are."""

    fine = "fine"  # a step of the fine model's optimizer on the fine data stream
    coarse = "coarse"  # a step of a coarse model
    control = "control"  # a fine-model step taken in place of a coarse phase (the schedule control)


class BatchStream(Choice):
    """The built-in names of a run's seeded batch streams, which a train phase draws from: the fine stream
    is drawn by fine steps alone, so fine step n of every run with one seed trains on the same batch. A
    method's parts may add streams of other names (training/parts.py)."""

    fine = "fine"
    coarse = "coarse"  # multilevel's (runtime/multilevel.py): its own seed and multilevel.coarse_batch_size


# The models a plan trains are named by their path (the index of the coarse model chosen at each level):
# letters, so "coarse A.B" (model B of model A) never reads as a step or a level number. Metrics rows keep
# the index itself in `coarse_model`; every message and name field uses these.
def coarse_name(path: tuple[int, ...]) -> str:
    """`A`, `B`, ... for a coarse model of level 1; `A.B` for model B of coarse model A; `` for the fine model."""
    return ".".join(_letter(i) for i in path)


def model_name(path: tuple[int, ...]) -> str:
    """`fine` or `coarse A.B`: how messages and the progress bar name the model a phase trains."""
    return "fine" if not path else f"coarse {coarse_name(path)}"


def _letter(i: int) -> str:
    return chr(ord("A") + i) if 0 <= i < 26 else f"#{i}"
