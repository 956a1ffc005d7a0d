"""The graph IR: the single source of truth for shapes and parameters."""

from tfspec.ir.build import build_graph
from tfspec.ir.graph import Graph, Node, Param

__all__ = ["Graph", "Node", "Param", "build_graph"]
