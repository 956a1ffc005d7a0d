"""The ops of memory tokens (``memory_tokens`` on a stack, ``tfspec.spec.memory_tokens``): the m
learned vectors put before a text stack's sequence, and their outputs dropped before the head.

Between the two the stack's sequence is m positions longer than the tokens: ``widened`` names
those ops, and the analyses read their sizes at n + m (FLOPs, ``report --train``, the KV cache),
the ops outside (embeddings, the head) at n.
"""

from __future__ import annotations

import networkx as nx

from . import Op, keeps_nothing, no_products, register
from .patches import LearnedTokens


@register
class MemoryTokens(LearnedTokens):
    """``count`` learned vectors before every sequence of the stack (index ``at`` = 0), which
    also widen its padding (never padded) and positions (-m..-1 inside attention); in a
    decoding step after the first they are in the cache already and nothing is put in."""
    name, position_wise = "memory_tokens", True


@register
class DropTokens(Op):
    """(B, count + L, d) -> (B, L, d): the first ``count`` positions (the memory) dropped."""
    name, position_wise = "drop_tokens", True
    flops, saved = staticmethod(no_products), staticmethod(keeps_nothing)


def widened(graph) -> dict[str, int]:
    """Node name -> m for each op whose output holds the m memory positions too: from a
    ``memory_tokens`` op up to the ``drop_tokens`` op that ends its stack (not itself)."""
    found = {}
    if not any(stack.memory_tokens for _, stack in graph.spec.stacks):  # the common case, without a walk
        return found
    for start in (n for n in graph.nodes() if n.op == "memory_tokens"):
        end = next(n for n in graph.nodes() if n.op == "drop_tokens" and n.stack == start.stack)
        inside = (nx.descendants(graph.nx, start.name) & nx.ancestors(graph.nx, end.name)) | {start.name}
        found |= dict.fromkeys(inside, start.attrs["count"])
    return found


def sizes_at(graph, span: dict[str, int], name: str, sizes: dict) -> dict:
    """``sizes`` (shape symbol -> number) as op ``name`` sees them: its stack's sequence m longer
    where ``span`` (``widened(graph)``) holds it."""
    m = span.get(name, 0)
    if not m:
        return sizes
    seq = {"encoder": "S", "decoder": "T"}[graph.node(name).stack]
    return sizes | {seq: sizes[seq] + m}
