"""Parameter counts per component, read from the IR's parameter table (nothing allocated)."""

from __future__ import annotations

from dataclasses import dataclass

from tfspec.ir import Graph


@dataclass(frozen=True)
class ParamReport:
    """Trainable parameters of a model, tied matrices counted once (at their owner)."""

    name: str
    total: int
    sections: dict[str, dict[str, int]]
    """Section (embeddings, encoder, decoder, output) -> component -> count."""
    tied: dict[str, str]
    """``<node>.<role>`` that reuses another node's parameter -> that parameter."""
    active: int
    """Parameters each token uses: the total less a mixture of experts' unchosen experts."""

    def to_json(self) -> dict:
        params = {name: {**parts, "total": sum(parts.values())} for name, parts in self.sections.items()}
        return {"total": self.total, "active": self.active, **params, "tied": self.tied}


def analyze_params(graph: Graph) -> ParamReport:
    """Count every IR parameter once, under the section and component of the op that owns it."""
    sections: dict[str, dict[str, int]] = {}
    idle = 0
    for node in graph.nodes():
        owned = {role: graph.params[p].numel for role, p in node.params.items() if node.owns(role)}
        if node.layer is not None:
            idle += node.layer.idle(owned)
        if node.component in ("embedding", "positional"):
            section = "embeddings"
        else:
            section = node.stack or "output"
        if owned or node.component in ("embedding", "projection"):
            parts = sections.setdefault(section, {})
            parts.setdefault(node.component, 0)
            apart = getattr(node.layer, "apart", {})
            for role, n in owned.items():  # a tensor counted apart by convention has its own line
                line = apart.get(role, node.component)
                parts[line] = parts.get(line, 0) + n
    return ParamReport(graph.name, graph.num_params, sections, graph.tied(), graph.num_params - idle)
