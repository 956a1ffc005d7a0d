"""Terms that position kinds add to attention logits, in ONNX graphs: one module per kind,
each the twin of the PyTorch backend's (``backends/torch/scores``).

A term is a function registered with ``@score_term(kind)``: ``fn(e, node, q, k)`` for
(B, h, Lq, d) queries and (B, h, Lk, d) keys returns an additive (1 or B, h, Lq, Lk) bias
(``Emit.grid`` gives the positions, which follow the past in step graphs). Every module of
this package is imported here, so a new kind is one new file.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from tfspec.registry import registrar

SCORE_TERMS: dict[str, Callable] = {}

score_term = registrar(SCORE_TERMS, "ONNX score terms for positions kind")
"""Decorator registering the term function of a positions kind."""

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
