"""Score modifiers in ONNX graphs, one module per attention field, each the twin of the PyTorch
backend's (``backends/torch/modifiers``), applied in the order ``SCORE_MODIFIERS`` of
``tfspec.layers.attention`` lists, after the position terms and before the mask.

A modifier is a function registered with ``@score_modifier(field)``: ``fn(value)`` returns
``modify(b, scores)`` over (B, h, Lq, Lk) logits. Every module of this package is imported here.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from tfspec import modifiers
from tfspec.registry import registrar

SCORE_MODIFIERS: dict[str, Callable] = {}

score_modifier = registrar(SCORE_MODIFIERS, "ONNX score modifiers for field")
"""Decorator registering the modifier of an attention field."""


def modifiers_of(attrs: dict, node=None, stage: str = "logits") -> list[Callable]:
    """The modifiers an attention node's ``attrs`` set at ``stage`` (``tfspec.modifiers.STAGES``),
    in the order they apply, each as ``modify(b, scores)`` (``tfspec.modifiers.lowered``)."""
    return modifiers.lowered(SCORE_MODIFIERS, attrs, node, stage)


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
