"""Talking heads after the softmax (Shazeer et al. 2020): the heads' weights of each query-key pair
mixed by a learned h x h matrix, the same mix as ``mix_logits.py``'s."""

from __future__ import annotations

from . import score_modifier
from .mix_logits import mix

score_modifier("mix_weights")(mix("mix_weights"))
