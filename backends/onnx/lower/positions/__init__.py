"""Position stages of attention in ONNX graphs, one module per position kind, each the twin of
the PyTorch backend's (``backends/torch/positions``: the same hooks at the same points).

A stage is a ``PositionStage`` subclass registered with ``@position_stage(kind)``, built for
one lowering of one attention node (``stage(node)``; so a hook may keep what an earlier one
built, as relative's output reuses its logits' one-hot distances). Hooks, None where unused:

- ``turn(e, q, k)``: (B, L, h*d) queries and (B, L, g*d) keys (or their flat views) as they
  leave the projection -> the same (rotary);
- ``logits(e, q, k)``: (B, h, Lq, d) queries and (B, h, Lk, d) keys -> an additive (1 or B, h,
  Lq, Lk) logit term (``Emit.grid`` gives the positions, which follow the past in step graphs);
- ``output(e, weights, y)``: (B, h, Lq, Lk) softmax weights and (B, h, Lq, d_v) output -> the
  output.

Kinds that only add to the logits register a score term in ``backends/onnx/scores``, which
``stage_of`` gives as a ``logits`` hook. Adding a position kind: see ``backends/torch/positions``;
every module of this package is imported here, so the new file is all this backend needs.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from tfspec.ir import Node
from tfspec.registry import registrar

from ..scores import SCORE_TERMS


class PositionStage:
    """The hooks of one attention node's position kind; None where the kind does nothing."""

    turn: Callable | None = None
    logits: Callable | None = None
    output: Callable | None = None
    from_input: Callable | None = None
    """``from_input(e, x)``: the layer's input (B * L, d_model) or (B, L, d_model) -> an additive
    (B, h, Lq, Lk) logit term computed from it (forgetting attention's gates; carried state
    through ``e.variant.append``)."""
    masked: Callable | None = None
    """``masked(e, q, k, scores)``: (B, h, Lq, d) queries and keys and the (B, h, Lq, Lk) logits
    after the mask -> an additive term (CoPE's positions, counted over the visible keys)."""

    def __init__(self, node: Node):
        self.node = node


POSITION_STAGES: dict[str, Callable] = {}

position_stage = registrar(POSITION_STAGES, "ONNX position stages for kind")
"""Decorator registering the ``PositionStage`` class of a positions kind."""


def stage_of(node: Node) -> PositionStage | None:
    """The position stage of an attention ``node``: its kind's registered stage, or a stage
    whose ``logits`` is the kind's score term; None for kinds outside attention or none."""
    kind = (node.attrs["positions"] or {}).get("kind")
    if kind in POSITION_STAGES:
        return POSITION_STAGES[kind](node)
    if kind in SCORE_TERMS:
        stage, term = PositionStage(node), SCORE_TERMS[kind]
        stage.logits = lambda e, q, k: term(e, node, q, k)
        return stage
    return None


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
