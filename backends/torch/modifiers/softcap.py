"""Soft-capping (Gemma 2's attn_logit_softcapping, Grok-1's 30) in PyTorch: c * tanh(s / c)
bounds every logit by c while keeping their order."""

from __future__ import annotations

import torch

from . import score_modifier


@score_modifier("softcap")
def softcap(c: float):
    return lambda scores: torch.tanh(scores / c) * c
