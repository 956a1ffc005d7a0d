"""Dumping the IR for people and tools: JSON, Graphviz dot and Mermaid."""

from __future__ import annotations

import json

from tfspec.ir.graph import Graph, Node


def _shape(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def to_json(graph: Graph) -> dict:
    """Ops, tensors (edges with their shapes), the parameter table and the named ports."""
    return {
        "name": graph.name,
        "ports": graph.ports,
        "nodes": [{"name": n.name, "op": n.op, "shape": list(n.shape), "attrs": n.attrs, "params": n.params,
                   "component": n.component, "stack": n.stack,
                   **({"layer": n.layer.model_dump()} if n.layer is not None else {})} for n in graph.nodes()],
        "edges": [{"from": u, "to": v, "port": d["port"], "shape": list(d["shape"])}
                  for u, v, d in graph.nx.edges(data=True)],
        "params": {p.name: {"shape": list(p.shape), "init": p.init, "numel": p.numel} for p in graph.params.values()},
        "num_params": graph.num_params,
    }


def _label(n: Node) -> str:
    detail = n.attrs.get("kind") if n.op == "attention" else ""
    return f"{n.name}\\n{n.op}{' ' + detail if detail else ''} {_shape(n.shape)}"


def to_dot(graph: Graph) -> str:
    lines = [f'digraph "{graph.name}" {{', "  rankdir=TB;", '  node [shape=box, fontsize=10];']
    for n in graph.nodes():
        lines.append(f'  "{n.name}" [label="{_label(n)}"];')
    for u, v, d in graph.nx.edges(data=True):
        lines.append(f'  "{u}" -> "{v}" [label="{_shape(d["shape"])}", fontsize=8];')
    return "\n".join(lines + ["}"]) + "\n"


def to_mermaid(graph: Graph) -> str:
    ids = {name: f"n{i}" for i, name in enumerate(graph.nx.nodes)}
    lines = ["flowchart TD"]
    for n in graph.nodes():
        lines.append(f'  {ids[n.name]}["{_label(n).replace(chr(92) + "n", "<br/>")}"]')
    for u, v, d in graph.nx.edges(data=True):
        lines.append(f'  {ids[u]} -->|"{_shape(d["shape"])}"| {ids[v]}')
    return "\n".join(lines) + "\n"


FORMATS = {"json": lambda g: json.dumps(to_json(g), indent=2) + "\n", "dot": to_dot, "mermaid": to_mermaid}
