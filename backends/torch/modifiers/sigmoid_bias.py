"""Sigmoid attention (Ramapuram et al. 2024) in PyTorch: weights sigmoid(s + b) in place of the
softmax; masked logits (the dtype's minimum) weigh 0."""

from __future__ import annotations

import torch

from . import score_modifier


@score_modifier("sigmoid_bias")
def sigmoid_bias(b: float):
    return lambda scores: torch.sigmoid(scores + b)
