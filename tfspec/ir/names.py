"""Parameter names of earlier releases, so their checkpoints keep loading.

tfspec 0.1.0 named a sub-layer after its mask kind: sliding-window and local attention were
``local_attn``, full and causal attention ``self_attn``. A stack that interleaves the two (as
Gemma 2's and Mistral-style hybrids do) then changed its checkpoint keys with each layer's
kind. Every self-attention kind is now ``self_attn``; this module maps the old names onto the
new ones for the weights files written before.
"""

from __future__ import annotations

from tfspec.ir.graph import Graph

STEMS_0_1 = {"restricted_self_attention": "local_attn", "local_1d_self_attention": "local_attn",
             "local_2d_self_attention": "local_attn"}
"""Layer kind -> its node-name stem in tfspec 0.1.0, where it differs from today's."""


def sublayer_names(stack, stems: dict[str, str]) -> list[str]:
    """The node name of each sub-layer of ``stack`` (``layers.I.STEM`` with ``_N`` for the
    N-th repeat of a stem in one layer), naming each kind by ``stems`` or its own stem."""
    names, seen = [], {}
    for index, layer in stack.sublayers():
        stem = stems.get(layer.kind, layer.stem)
        count = seen.get((index, stem), 0)
        seen[index, stem] = count + 1
        names.append(f"layers.{index}.{stem}" + (f"_{count}" if count else ""))
    return names


def legacy_names(graph: Graph) -> dict[str, str]:
    """Each parameter's name in tfspec 0.1.0 -> its name now, for the names that changed."""
    renamed: dict[str, str] = {}
    for stack_name, stack in graph.spec.stacks:
        for old, new in zip(sublayer_names(stack, STEMS_0_1), sublayer_names(stack, {})):
            if old != new:
                renamed[f"{stack_name}.{old}"] = f"{stack_name}.{new}"
    mapped = {}
    for param in graph.params:
        for old, new in renamed.items():
            for suffix in (".", "_norm."):  # the sub-layer's own parameters and its norm's
                if param.startswith(new + suffix):
                    mapped[old + param[len(new):]] = param
    return mapped


def upgrade(tensors: dict, graph: Graph) -> dict:
    """``tensors`` keyed by parameter names of tfspec 0.1.0, or by ``NAME.STATE`` under them
    (AdamW's moments in a training checkpoint), under today's names; other keys unchanged."""
    renamed = legacy_names(graph)

    def new(key: str) -> str:
        head, _, tail = key.rpartition(".")
        return renamed.get(key) or (f"{renamed[head]}.{tail}" if head in renamed else key)

    return {new(key): value for key, value in tensors.items()}
