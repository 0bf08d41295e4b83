"""Prefetched batches: the training step gets each one ahead (built in blocks, copied while the step runs on
CUDA) and still trains fine step n of every run with the same seed on the same batch, the sampler's."""

from __future__ import annotations

from helpers import batch_digest, compose_config, typed

from mltrain.data import BatchSampler, load_tokens
from mltrain.training.trainer import Trainer

_STEP = Trainer.train_step  # the real one, whatever a test patches


def _trained_batches(monkeypatch, *overrides: str) -> dict[str, list[str]]:
    """Digests of the batches every training step of a run trained on, by step kind, as the step got them
    (after the prefetch)."""
    from mltrain.run import build

    seen: dict[str, list[str]] = {}
    original = _STEP

    def step(self, view, optimizer, lr, sampler, kind):
        real = self.to_device

        def recorded(batch):
            x, y = real(batch)
            seen.setdefault(str(kind), []).append(batch_digest(x, y))
            return x, y

        self.to_device = recorded
        try:
            return original(self, view, optimizer, lr, sampler, kind)
        finally:
            del self.to_device

    monkeypatch.setattr(Trainer, "train_step", step)
    session = build(typed(compose_config("train.max_steps=12", *overrides)), lambda row: None)
    session.runner.run()
    return seen


def test_prefetched_batches_are_the_samplers_and_fine_step_n_is_paired_across_runs(monkeypatch):
    runs = {"single": [], "single, no prefetch": ["train.prefetch=false"],
            "multilevel": ["coarsening=evenodd", "multilevel.n_cycles=3", "multilevel.coarse_steps=2"],
            "multilevel, no prefetch": ["coarsening=evenodd", "multilevel.n_cycles=3", "multilevel.coarse_steps=2",
                                        "train.prefetch=false"],
            "layer_drop": ["experiment=layer_drop"]}
    seen = {name: _trained_batches(monkeypatch, *extra) for name, extra in runs.items()}
    cfg = compose_config("train.max_steps=12")
    train = load_tokens(cfg.data).train
    sampler = BatchSampler(train, cfg.train.batch_size, cfg.model.block_size, seed=cfg.seed)
    expected = [batch_digest(*sampler.batch(i)) for i in range(12)]  # fine step n trains on batch n of its stream
    for name, batches in seen.items():
        assert batches["fine"] == expected, name
    assert seen["multilevel"]["coarse"] == seen["multilevel, no prefetch"]["coarse"]
    assert len(seen["multilevel"]["coarse"]) == 3 * 2 * 2 and not set(seen["multilevel"]["coarse"]) & set(expected)
