"""Training with the PyTorch backend: one loop (``trainer``), the tasks it trains (``tasks``),
batches, schedule and checkpoints (§5 of the paper)."""

from .batches import Pairs, collate, encode, make_batches
from .tasks.text import TrainConfig, train

__all__ = ["Pairs", "TrainConfig", "collate", "encode", "make_batches", "train"]
