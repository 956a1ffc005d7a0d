"""Position stages of attention in PyTorch: what a position kind does inside attention, one
module per kind (``rotary.py``, ``relative.py``; the ONNX twins are ``backends/onnx/positions``).

A stage is a ``PositionStage`` subclass registered with ``@position_stage(kind)`` and built once
per attention node (``stage(node)``). It fills in the hooks its kind needs, each None otherwise:

- ``turn(ctx, q, k)``: the (B, L, h, d) queries and (B, L, g, d) keys of one call, as they leave
  the projection (after qk_norm, before the cache) -> the same shapes (rotary: Su et al. 2021);
- ``logits(ctx, module, q, k)``: the (B, h, Lq, d) queries and (B, h, Lk, d) keys -> an additive
  (1 or B, h, Lq, Lk) logit term, the queries being the last Lq of the Lk key positions (Shaw et
  al.'s q_i·a_K);
- ``output(ctx, module, weights, y)``: the (B, h, Lq, Lk) softmax weights and (B, h, Lq, d_v)
  output -> the output (Shaw et al.'s sum_j w_ij a_V).

``module`` is the attention module, which holds the node's parameters under their IR roles.
A kind with a ``logits`` or ``output`` hook has its scores spelled out; one with only ``turn``
keeps the fused kernels. Kinds that only add to the logits (T5's bias, ALiBi, DeBERTa) register a
score term in ``backends/torch/scores`` instead, which ``stage_of`` gives as a ``logits`` hook.

Adding a position kind: its name in ``tfspec/spec/positions.py`` (and any parameters in
``Attention.lower``), shared math in ``tfspec/ir/``, one module here (or in ``scores``) and its
twin in ``backends/onnx/positions`` (or ``scores``). Every module of this package is imported
here, so the new file is all the backend needs.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from tfspec.registry import registrar

from ..scores import SCORE_TERMS


class PositionStage:
    """The hooks of one attention node's position kind; None where the kind does nothing."""

    turn: Callable | None = None
    logits: Callable | None = None
    output: Callable | None = None
    from_input: Callable | None = None
    """``from_input(ctx, module, x)``: the layer's (B, Lq, d_model) input of one call (after the
    cache's keys are joined) -> an additive (B, h, Lq, Lk) logit term computed from the input
    (forgetting attention's gates), keeping in ``ctx.state`` what later steps read."""
    masked: Callable | None = None
    """``masked(ctx, module, q, scores)``: the (B, h, Lq, d) queries and the (B, h, Lq, Lk)
    logits after the mask -> an additive term (CoPE's positions, counted over the visible keys)."""


POSITION_STAGES: dict[str, Callable] = {}

position_stage = registrar(POSITION_STAGES, "PyTorch position stages for kind")
"""Decorator registering the ``PositionStage`` class of a positions kind."""


def stage_of(node) -> PositionStage | None:
    """The position stage of an attention ``node``: its kind's registered stage, or a stage
    whose ``logits`` is the kind's score term; None for kinds that act outside attention (the
    embeddings' sinusoids and tables) or no positions."""
    kind = (node.attrs["positions"] or {}).get("kind")
    if kind in POSITION_STAGES:
        return POSITION_STAGES[kind](node)
    if kind in SCORE_TERMS:
        stage = PositionStage()
        stage.logits = SCORE_TERMS[kind](node)
        return stage
    return None


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
