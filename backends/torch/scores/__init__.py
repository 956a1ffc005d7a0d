"""Terms that position kinds add to attention logits, in PyTorch: one module per kind.

A term is a class registered with ``@score_term(kind)``: built once per attention node
(``term(node)``), called per forward with ``(ctx, module, q, k)``, the (B, h, Lq, d_k) queries
and (B, h, Lk, d_k) keys (a term may read them: DeBERTa's), and returning an additive (1 or
B, h, Lq, Lk) bias, the queries being the last Lq of the Lk key positions (a decoding step
follows its cache). Every module of this package is imported here, so a new
kind is one new file (and its ONNX twin in ``backends/onnx/scores``).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from tfspec.registry import registrar

SCORE_TERMS: dict[str, Callable] = {}

score_term = registrar(SCORE_TERMS, "PyTorch score terms for positions kind")
"""Decorator registering the term class of a positions kind."""

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
