"""Training with the PyTorch backend: batches, schedule, loop, checkpoints (§5 of the paper)."""

from .batches import Pairs, collate, encode, make_batches
from .trainer import TrainConfig, train

__all__ = ["Pairs", "TrainConfig", "collate", "encode", "make_batches", "train"]
