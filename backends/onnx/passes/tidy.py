"""Two clean-ups of an emitted graph's node list, run on every graph written: nodes whose
results nothing reads are dropped, and nodes that compute the same thing twice (one operator,
the same inputs and attributes) are merged into the first.

Lowerings build some shape arithmetic eagerly (a position grid that a fused operator then does
not read), and rewrites (``fused``) repeat per layer what reads the same tensors. onnxruntime
removes neither at ``ORT_ENABLE_ALL``: its saved optimised model of `small`'s in-place step graph
kept all 10 unread nodes and both ``Shape(tgt)``. Each node left costs a decoding step a kernel
dispatch (~0.4 us of CPU on this machine's onnxruntime 1.32, a chain of Adds on 256 floats).
"""

from __future__ import annotations

import onnx

RANDOM = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
          "Dropout"}
"""Operators that must not be merged: two of them draw different numbers."""


def tidy(graph: onnx.GraphProto) -> int:
    """Merge repeated nodes, then drop unread ones, in place; how many nodes went."""
    before = len(graph.node)
    merge(graph)
    prune(graph)
    return before - len(graph.node)


def prune(graph: onnx.GraphProto) -> None:
    """Drop the nodes none of whose outputs a graph output needs (walking back from them), and
    the initializers no node left reads."""
    needed = {o.name for o in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output if o) or _has_subgraph(node):
            kept.append(node)
            needed.update(i for i in node.input if i)
            needed.update(_captured(node))
    _set(graph, list(reversed(kept)))
    kept_weights = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(kept_weights)


def merge(graph: onnx.GraphProto) -> None:
    """Point the readers of a node that repeats an earlier one (same operator, domain, inputs
    and attributes) at the earlier one's outputs, and drop it. A node producing a graph output,
    or a tensor a subgraph reads, stays (the name is kept)."""
    outputs = {o.name for o in graph.output}  # and names subgraphs read from outside (not renamed there)
    outputs |= {name for node in graph.node for name in _captured(node)}
    seen: dict[bytes, list[str]] = {}
    renamed: dict[str, str] = {}
    kept = []
    for node in graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = renamed.get(name, name)
        if node.op_type in RANDOM or _has_subgraph(node):
            kept.append(node)
            continue
        key = _key(node)
        first = seen.get(key)
        if first is None or any(o in outputs for o in node.output) or len(first) != len(node.output):
            seen.setdefault(key, list(node.output))
            kept.append(node)
            continue
        renamed.update((o, f) for o, f in zip(node.output, first) if o)
    _set(graph, kept)


def _key(node: onnx.NodeProto) -> bytes:
    """What a node computes: its operator, domain, inputs and attributes (not its name)."""
    bare = onnx.NodeProto(op_type=node.op_type, domain=node.domain, input=node.input)
    bare.attribute.extend(sorted(node.attribute, key=lambda a: a.name))
    return bare.SerializeToString(deterministic=True)


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _captured(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs (Loop, If, Scan bodies) read from the enclosing graph: every
    input name of their nodes (a superset, which only keeps more)."""
    names = set()
    for a in node.attribute:
        for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            for n in g.node:
                names.update(n.input)
                names.update(_captured(n))
    return names


def _set(graph: onnx.GraphProto, nodes: list) -> None:
    """The graph's nodes become ``nodes``; shapes recorded for tensors no longer made go."""
    del graph.node[:]
    graph.node.extend(nodes)
    made = {o for n in nodes for o in n.output}
    shapes = [v for v in graph.value_info if v.name in made]
    del graph.value_info[:]
    graph.value_info.extend(shapes)
