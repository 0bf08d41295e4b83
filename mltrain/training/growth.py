"""Carrying out a change of the fine model's blocks between two steps (mltrain/method/paths.py
BlockCopies: a stacking growth), the grow phases of a plan.
"""

from __future__ import annotations

from typing import Optional

import torch

from mltrain.method.paths import BlockCopies
from mltrain.model.gpt import GPT


@torch.no_grad()
def copy_blocks(model: GPT, optimizer: torch.optim.Optimizer, change: BlockCopies) -> None:
    """Overwrite blocks 0 … len(sources)−1 of `model` in place with copies of their sources (their
    weights as they were before the change), and carry the optimizer state as `change` says."""
    blocks, sources = model.blocks, change.sources()
    used = sorted(set(sources))
    weights = {i: {k: v.clone() for k, v in blocks[i].state_dict().items()} for i in used}
    states = {i: [_clone_state(optimizer.state.get(p)) for p in blocks[i].parameters()] for i in used}
    for j, i in enumerate(sources):
        blocks[j].load_state_dict(weights[i])  # copy_ into the existing parameters: optimizer and DDP keep them
    if not change.copies_state:
        optimizer.state.clear()
        return
    for j, i in enumerate(sources):
        for p, state in zip(blocks[j].parameters(), states[i]):
            optimizer.state.pop(p, None)
            if state is not None:
                optimizer.state[p] = _clone_state(state)


def _clone_state(state: Optional[dict]) -> Optional[dict]:
    if not state:
        return None
    return {k: v.clone() if torch.is_tensor(v) else v for k, v in state.items()}
