"""Score modifiers in PyTorch: attention fields that transform the logits after the position
terms and before the mask (``SCORE_MODIFIERS`` in ``tfspec.layers.attention`` names them in the
order applied), one module per field (``softcap.py``; the ONNX twins are in
``backends/onnx/modifiers``).

A modifier is a function registered with ``@score_modifier(field)``: ``fn(value)`` for the
field's value on an attention node returns ``modify(scores)`` over (B, h, Lq, Lk) logits. A node
with any modifier has its scores spelled out (no fused kernel). Adding one: its core module in
``tfspec/modifiers`` (the field and its checks), then one module here and its ONNX twin.
Every module of this package is imported here.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from tfspec import modifiers
from tfspec.registry import registrar

SCORE_MODIFIERS: dict[str, Callable] = {}

score_modifier = registrar(SCORE_MODIFIERS, "PyTorch score modifiers for field")
"""Decorator registering the modifier of an attention field."""


def modifiers_of(attrs: dict, module=None, stage: str = "logits") -> list[Callable]:
    """The modifiers an attention node's ``attrs`` set at ``stage`` (``tfspec.modifiers.STAGES``),
    in the order they apply, each as ``modify(scores)`` (``tfspec.modifiers.lowered``)."""
    return modifiers.lowered(SCORE_MODIFIERS, attrs, module, stage)


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
