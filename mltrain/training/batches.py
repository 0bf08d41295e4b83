"""A sampler's batches on the training device, the next one built and copied while the current step runs.

`DeviceBatches` wraps a sampler (mltrain/data/sampler.py: batches are a pure function of (seed, index),
and `position` is the next index) for the training step: `next_batch()` returns batch `position`, the
one already on the device when `prefetch()` made it during the previous step, and advances; on CUDA
`prefetch()` pins the next batch and starts its copy without waiting, so the host builds it while the
device still runs the step just queued. The host draws the batches of the next steps in blocks (the
sampler's `stacked_range`, about AHEAD_BYTES at a time): one draw after a step's work has left the caches
cold costs several times what draws in a row do. Prefetching changes no batch: the one made ahead is the one the
sampler gives for that index (for every seed, rank and world size), fine step n of every run with the
same seed still trains on the same batch, and a checkpoint records only the position (a batch made
ahead is made again after a resume).
"""

from __future__ import annotations

from typing import Any, Optional

import torch


AHEAD_BYTES = 4 << 20  # the host builds the batches of the next steps in blocks of about this size


class DeviceBatches:
    def __init__(self, sampler: Any, device: torch.device, prefetch: bool = True):
        self.sampler, self.device, self.enabled = sampler, device, prefetch
        self._on_cpu = device.type == "cpu"
        self._ready: Optional[tuple[tuple[int, int], tuple[torch.Tensor, torch.Tensor]]] = None
        # (seed, first index), then each batch of the block as a view of it (split once per block)
        self._block: Optional[tuple[tuple[int, int], tuple]] = None
        per_batch = 2 * getattr(sampler, "local_batch_size", 1) * getattr(sampler, "block_size", 1) * 8
        self.ahead = max(1, min(64, AHEAD_BYTES // per_batch))

    def __getattr__(self, name: str) -> Any:  # arrays, seed, batch_size, batch(), ...: the sampler's own
        return getattr(self.sampler, name)

    @property
    def position(self) -> int:
        return self.sampler.position

    @position.setter
    def position(self, value: int) -> None:
        self.sampler.position = value

    def load(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch `index` on the device: one pinned copy of (x, y) together on CUDA (not waited for)."""
        if not hasattr(self.sampler, "stacked_range"):
            x, y = self.sampler.batch(index)
            return x.to(self.device), y.to(self.device)
        batch = self._host(index)
        if self._on_cpu:  # (x, y) as the block holds them: no copy
            return batch
        if self.device.type == "cuda":
            xy = batch.pin_memory().to(self.device, non_blocking=True)
        else:
            xy = batch.to(self.device)
        return xy[0], xy[1]

    def _host(self, index: int) -> Any:
        """Batch `index` from a block of the next `ahead` batches built together (sampler.stacked_range: the
        same batches, drawn in one loop): on the CPU its (x, y), split once per block; for another device
        the stacked (x, y) as one tensor, copied there in one go."""
        seed, block = self.sampler.seed, self._block
        if block is None or block[0][0] != seed or not 0 <= index - block[0][1] < len(block[1]):
            stacked = self.sampler.stacked_range(index, self.ahead)
            batches = tuple(zip(stacked[:, 0].unbind(0), stacked[:, 1].unbind(0))) if self._on_cpu else stacked.unbind(0)
            block = self._block = ((seed, index), batches)
        return block[1][index - block[0][1]]

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        index = self.sampler.position
        ready, self._ready = self._ready, None
        batch = ready[1] if ready is not None and ready[0] == (self.sampler.seed, index) else self.load(index)
        self.sampler.position = index + 1
        return batch

    def prefetch(self) -> None:
        """Make batch `position` now (on CUDA its copy runs while the device works)."""
        key = (self.sampler.seed, self.sampler.position)
        if self.enabled and (self._ready is None or self._ready[0] != key):
            self._ready = (key, self.load(key[1]))

    def state_dict(self) -> dict:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self._ready = self._block = None
        self.sampler.load_state_dict(state)
