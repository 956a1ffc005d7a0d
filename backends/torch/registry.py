"""The registry of PyTorch lowerings (one per IR op) and what they share.

A lowering takes an IR node and returns a callable ``fn(ctx, *inputs)``; when that callable
is an ``nn.Module`` its parameters must carry exactly the node's roles and IR shapes, which
``TorchModel`` checks when it is built.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from tfspec.ir import Graph, Node
from tfspec.registry import registrar

LOWERINGS: dict[str, Callable[[Node, Graph], Callable]] = {}


lowering = registrar(LOWERINGS, "PyTorch lowerings for IR op")
"""Decorator registering the PyTorch lowering of IR op ``op``."""


class OpModule(nn.Module):
    """A module holding one IR node's parameters under their IR roles.

    Roles the node owns become fresh tensors of the IR shape (initialised later, from the IR);
    tied roles start empty and ``TorchModel`` points them at the owner's parameter.
    """

    def __init__(self, node: Node, graph: Graph):
        super().__init__()
        self.node_name = node.name
        for role, name in node.params.items():
            shape = graph.params[name].shape
            self.register_parameter(role, nn.Parameter(torch.empty(shape)) if node.owns(role) else None)

    def forward(self, ctx, *inputs):  # pragma: no cover - every lowering overrides it
        raise NotImplementedError
