"""Baselines an image model's bits per dimension must beat (numpy only).

Bits per dimension: the test set's negative log2-likelihood divided by its intensities
(images x height x width x channels), the Image Transformer's measure (Parmar et al. 2018, §5).
"""

from __future__ import annotations

import numpy as np


def uniform_bits(levels: int) -> float:
    """Every intensity equally likely: log2(levels) bits per dimension (8 for 256 levels)."""
    return float(np.log2(levels))


def histogram_bits(train: np.ndarray, test: np.ndarray, levels: int) -> float:
    """Each position (row, column, channel) an independent categorical, fitted on ``train`` by
    Laplace-smoothed counts (add one per level): no pixel sees any other pixel."""
    train, test = train.reshape(len(train), -1), test.reshape(len(test), -1)
    counts = np.ones((train.shape[1], levels))
    np.add.at(counts, (np.arange(train.shape[1])[None, :], train.astype(np.int64)), 1)
    logp = np.log2(counts / counts.sum(1, keepdims=True))
    return float(-logp[np.arange(test.shape[1])[None, :], test.astype(np.int64)].mean())


def class_histogram_bits(train: np.ndarray, train_labels: np.ndarray, test: np.ndarray,
                         test_labels: np.ndarray, levels: int) -> float:
    """The per-position histogram fitted per class, each test image scored under its own class:
    the baseline for a class-conditional model."""
    total = 0.0
    for k in np.unique(test_labels):
        mine = test[test_labels == k]
        total += histogram_bits(train[train_labels == k], mine, levels) * mine[0].size * len(mine)
    return total / test.size
