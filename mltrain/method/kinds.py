"""The vocabularies of what runs: the kind of a run, of a phase of its plan, and of an optimizer step;
the names of the models a plan trains.

Torch-free on purpose: the tools that read run files (mltrain-compare, mltrain-study) use these names
without importing the training code. Each is a `Choice` (a str Enum), so a value written to
summary.json or metrics.jsonl is the plain string and compares equal to it.
"""

from __future__ import annotations

from mltrain.choice import Choice


class RunKind(Choice):
    """What a run trains: the method, as summary.json's `run_kind` records it."""

    single = "single"  # single-level training: the baseline every other kind is measured against
    multilevel = "multilevel"  # coarse models trained in cycles and prolonged into the fine model
    # The multilevel plan with every coarse phase replaced by fine steps at the coarse LR for the same
    # FLOPs: isolates what the high-LR phase alone does, with no coarse model.
    schedule_control = "schedule_control"
    stacking = "stacking"  # a shallow model grown by copying its blocks (progressive stacking)
    layer_drop = "layer_drop"  # every step skips blocks at random (progressive layer dropping)
    raptr = "raptr"  # stages of random sub-paths of growing length (RaPTr)


class PhaseKind(Choice):
    """One entry of a run's plan."""

    train = "train"  # optimizer steps of one model (or view)
    restrict = "restrict"  # initialise a coarse model from its parent
    diagnose = "diagnose"  # coarse vs parent loss and gradient agreement, measured, not trained
    prolong = "prolong"  # carry a coarse model's weights back into its parent
    evaluate = "evaluate"  # held-out loss of the fine model
    grow = "grow"  # copy the fine model's first blocks into deeper ones (progressive stacking)


class StepKind(Choice):
    """Which counter an optimizer step adds to (TrainState) and which train rows it is averaged in."""

    fine = "fine"  # a step of the fine model's optimizer on the fine data stream
    coarse = "coarse"  # a step of a coarse model
    control = "control"  # a fine-model step taken in place of a coarse phase (the schedule control)


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
