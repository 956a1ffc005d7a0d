"""The optimiser and learning-rate schedule of §5.3 and the loss of §5.4."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rate(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """Equation 3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step from 1."""
    step = max(step, 1)
    return scale * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def adam(params, fused: bool = False) -> torch.optim.Adam:
    """Adam with beta1 = 0.9, beta2 = 0.98, epsilon = 1e-9 (§5.3); the rate is set per step."""
    return torch.optim.Adam(params, lr=0.0, betas=(0.9, 0.98), eps=1e-9, fused=fused or None)


def smoothed_loss(logits: torch.Tensor, target: torch.Tensor, pad: int, smoothing: float,
                  keep: torch.Tensor | None = None, normalised: bool = False):
    """Summed label-smoothed cross-entropy (§5.4) and summed NLL over the targets ``keep``
    (B, T) marks (the batch's loss_mask; by default those that are not ``pad``); ``normalised``:
    ``logits`` are log-probabilities already (``Spec.outputs_log_probs``), taken as they are."""
    logp = (logits.float() if normalised else F.log_softmax(logits.float(), -1)).flatten(0, 1)
    target = target.flatten()
    keep = target != pad if keep is None else keep.flatten()
    nll = -logp.gather(1, target[:, None]).squeeze(1)
    smooth = -logp.mean(-1)
    loss = (1 - smoothing) * nll + smoothing * smooth
    return loss[keep].sum(), nll[keep].sum().detach()
