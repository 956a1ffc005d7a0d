"""Padding as data: which tokens of a padded batch are real.

Every graph tfspec emits and ``TorchModel.run`` take masks (1 or true at real tokens, the
``attention_mask`` of transformers and optimum), and tfspec's own batchers pass the lengths
they padded to: training, fine-tuning, ``translate``, ``serve`` and ``evaluate`` never ask a
token id whether it is padding, so a pad-equal token inside an input is a word (Qwen2 pads,
starts and ends with one <|endoftext|>; Marian and T5 start the decoder from the pad token).
"""

from __future__ import annotations

import numpy as np


def lengths_mask(lengths, width: int) -> np.ndarray:
    """bool (B, width): true at each row's first ``lengths[i]`` positions (a right-padded batch)."""
    return np.arange(width)[None, :] < np.asarray(lengths)[:, None]


def implied_mask(tokens, pad_id: int, target: bool = False, starts_with_pad: bool = False):
    """The mask of a batch handed over without one (``TorchModel(tokens)``, ``OnnxModel.logits``,
    ``search(src)`` called from Python): real wherever the token is not ``pad_id``, and a target's
    first token when the decoder starts from the pad token. What callers that padded with
    ``pad_id`` meant before masks were data; a caller whose inputs hold the pad id as a word
    passes its own mask. Works on numpy arrays and torch tensors alike."""
    keep = tokens != pad_id
    if target and starts_with_pad:
        keep[:, 0] = True
    return keep
