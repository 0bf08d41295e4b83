"""Random-window batches from token arrays, as a pure function of (seed, batch index).

Batch `index` draws `batch_size` windows of `block_size + 1` tokens with
`np.random.default_rng([seed, index])`: each window start is uniform over all valid starts of all
arrays together, so an array is chosen with probability proportional to its number of valid starts
(len - block_size) and a window never crosses from one array (shard) into the next. An array shorter
than block_size + 1 has no valid start: it is skipped with a warning (the short last shard of a
folder), and DataError is raised only when no array of the split is long enough. x is the first
block_size tokens of the window, y the last block_size (x shifted by one).

The global batch does not depend on world_size: rank r of W returns rows [r*B/W, (r+1)*B/W), so any
number of ranks together see exactly the single-process batch. Nothing is consumed: resuming needs
only `position` (see state_dict).

The held-out set is no batch of it: `spread(count)` gives `count` windows evenly spaced over the valid
starts of all arrays together, a function of the arrays, block_size and count alone (no seed, no batch
size, no ranks), so every run of one data set, block size and train.eval_tokens is measured on the same
tokens (training/evaluation.py).
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np
import torch

from mltrain.core.errors import DataError

log = logging.getLogger(__name__)


class BatchSampler:
    def __init__(
        self,
        arrays: Sequence[np.ndarray],
        batch_size: int,
        block_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        split: str = "train",
        vocab_size: Optional[int] = None,
    ):
        """`split` only names the data in error messages. `vocab_size`: every batch's ids are checked
        against it (a token id beyond the vocabulary is one line naming its array, not an IndexError
        inside the embedding; the loaders check whole arrays before training, this catches what changed
        under a run)."""
        if batch_size <= 0 or block_size <= 0:
            raise ValueError(f"batch_size={batch_size} and block_size={block_size} must be > 0")
        if world_size <= 0 or not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
        if batch_size % world_size:
            raise DataError(f"batch size {batch_size} is not divisible by world_size={world_size}")
        if not arrays:
            raise DataError(f"the {split} split has no token arrays")
        usable = [a for a in arrays if len(a) >= block_size + 1]
        if not usable:
            sizes = ", ".join(f"{len(a):,}" for a in arrays[:8])
            raise DataError(
                f"the {split} split has {sum(map(len, arrays)):,} tokens ({'arrays of ' if len(arrays) > 1 else ''}"
                f"{sizes}{', ...' if len(arrays) > 8 else ''}), fewer than block_size + 1 = {block_size + 1} "
                f"in {'every array' if len(arrays) > 1 else 'it'}: use a smaller model.block_size or more data"
            )
        for i, a in enumerate(arrays):
            if len(a) < block_size + 1:  # e.g. the short last shard of a prepared folder: never sampled
                log.warning(
                    "the %s split's array %d of %d has only %s tokens (< block_size + 1 = %d): not sampled",
                    split, i, len(arrays), f"{len(a):,}", block_size + 1,
                )  # fmt: skip
        self.arrays = usable
        self.split, self.vocab_size = split, vocab_size
        self.batch_size, self.block_size, self.seed = batch_size, block_size, int(seed)
        self.rank, self.world_size = rank, world_size
        self.local_batch_size = batch_size // world_size
        starts = np.array([len(a) - block_size for a in self.arrays], dtype=np.int64)
        self._cum_starts = np.cumsum(starts)  # valid window starts of arrays[0..i] together
        self._first_start = np.concatenate([[0], self._cum_starts[:-1]])  # the first flat start of each array
        self._window = np.arange(block_size + 1, dtype=np.int64)
        self.position = 0

    @property
    def n_windows(self) -> int:
        """Number of distinct windows (valid start positions) over all arrays."""
        return int(self._cum_starts[-1])

    def windows(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(array index, start offset) of each of the global batch's `batch_size` windows."""
        rng = np.random.default_rng([self.seed, int(index)])
        flat = rng.integers(0, self.n_windows, size=self.batch_size, dtype=np.int64)
        if len(self.arrays) == 1:
            return np.zeros_like(flat), flat
        which = np.searchsorted(self._cum_starts, flat, side="right")
        return which, flat - self._first_start[which]

    def stacked(self, index: int) -> torch.Tensor:
        """Rows [rank*B/W, (rank+1)*B/W) of global batch `index` as one int64 tensor of shape (2, B/W,
        block_size): x, then y (x shifted by one). Built with one gather per array the rows fall in (no
        loop over rows), so one copy moves both to a device."""
        which, offset = self.windows(index)
        lo, n = self.rank * self.local_batch_size, self.local_batch_size
        which, offset = which[lo : lo + n], offset[lo : lo + n]
        out = np.empty((2, n, self.block_size), dtype=np.int64)
        if len(self.arrays) == 1:
            rows = self.arrays[0][offset[:, None] + self._window]  # (n, block_size + 1)
            out[0], out[1] = rows[:, :-1], rows[:, 1:]
        else:
            for a in np.unique(which):
                mask = which == a
                rows = self.arrays[a][offset[mask, None] + self._window]
                out[0][mask], out[1][mask] = rows[:, :-1], rows[:, 1:]
        self._check_vocabulary(out, which, offset)
        return torch.from_numpy(out)

    def stacked_range(self, start: int, count: int) -> torch.Tensor:
        """`stacked(i)` for i in [start, start + count), as one tensor of shape (count, 2, B/W, block_size),
        each exactly `stacked(i)`: the draws of each index in one tight loop, the windows of all of them in
        one gather per array (a step's cold caches make a single batch's draw several times slower)."""
        n, lo = self.local_batch_size, self.rank * self.local_batch_size
        flat = np.empty((count, self.batch_size), dtype=np.int64)
        for k in range(count):
            flat[k] = np.random.default_rng([self.seed, start + k]).integers(0, self.n_windows, size=self.batch_size,
                                                                            dtype=np.int64)
        out = self._rows(flat[:, lo : lo + n].reshape(-1))
        return torch.from_numpy(out.reshape(2, count, n, self.block_size).transpose(1, 0, 2, 3).copy())

    def _rows(self, flat: np.ndarray) -> np.ndarray:
        """The windows at flat starts `flat` (over all arrays together) as (2, len(flat), block_size): x,
        then y; one gather per array the windows fall in, every id checked against the vocabulary."""
        out = np.empty((2, len(flat), self.block_size), dtype=np.int64)
        if len(self.arrays) == 1:
            which, offset = np.zeros_like(flat), flat
            rows = self.arrays[0][flat[:, None] + self._window]
            out[0], out[1] = rows[:, :-1], rows[:, 1:]
        else:
            which = np.searchsorted(self._cum_starts, flat, side="right")
            offset = flat - self._first_start[which]
            for a in np.unique(which):
                mask = which == a
                rows = self.arrays[a][offset[mask, None] + self._window]
                out[0][mask], out[1][mask] = rows[:, :-1], rows[:, 1:]
        self._check_vocabulary(out, which, offset)
        return out

    def spread(self, count: int) -> torch.Tensor:
        """The held-out set: `count` windows evenly spaced over the valid starts of all arrays together,
        as one int64 tensor (2, count, block_size), x then y, on the host, whole (not this rank's slice).
        Depends on the arrays, block_size and `count` only. Windows at least block_size apart never share
        an input token; a split too short for `count` of them gives as many as it holds (a warning says
        so) rather than repeating tokens."""
        if count <= 0:
            raise ValueError(f"count={count} must be > 0")
        room = max(1, self.n_windows // self.block_size)  # windows block_size apart that fit
        if count > room:
            log.warning("the %s split holds %d windows of %d tokens that do not overlap, fewer than the %d asked "
                        "(train.eval_tokens): the held-out set is those %d (%s tokens)", self.split, room,
                        self.block_size, count, room, f"{room * self.block_size:,}")  # fmt: skip
            count = room
        flat = (np.arange(count, dtype=np.int64) * self.n_windows) // count
        return torch.from_numpy(self._rows(flat))

    def batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows [rank*B/W, (rank+1)*B/W) of global batch `index`: int64 (x, y), y = x shifted by one."""
        x, y = self.stacked(index).unbind(0)
        return x, y

    def _check_vocabulary(self, out: np.ndarray, which: np.ndarray, offset: np.ndarray) -> None:
        """DataError naming the array, the position and the id when a batch (x and y: `out` of shape
        (2, n, block_size), row i from array which[i] at offset[i]) holds an id the vocabulary lacks:
        a cache or shard rewritten under its index would otherwise crash the embedding mid-run or train on
        the wrong rows. One max over the batch, on the host, off the device's critical path."""
        if self.vocab_size is None or not out.size or int(out.max()) < self.vocab_size:
            return
        from mltrain.data.inputs import out_of_vocabulary

        xy, i, j = map(int, np.unravel_index(int(np.argmax(out)), out.shape))
        a = int(which[i])
        where = getattr(self.arrays[a], "filename", None) or f"the {self.split} split's token array {a}"
        raise out_of_vocabulary(str(where), int(out[xy, i, j]), int(offset[i]) + j + xy, self.vocab_size,
                                "the run's tokenizer")

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.batch(self.position)
        self.position += 1
        return out

    def state_dict(self) -> dict:
        return {"position": self.position, "seed": self.seed}

    def load_state_dict(self, d: dict) -> None:
        """Continue the saved stream: its seed and position (batch size, ranks may differ)."""
        self.seed = int(d.get("seed", self.seed))
        self.position = int(d["position"])
