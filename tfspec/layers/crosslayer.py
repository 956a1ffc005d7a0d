"""What one self-attention layer hands to later ones: the stack's first values (value residual
learning) and the previous layer's pre-softmax logits (residual attention).

``value_residual`` (Zhou et al. 2024, ResFormer, eq. 3): a layer's values are mixed with the
values of its stack's first self-attention, v_n <- lam v_n + (1 - lam) v_1, before they are
cached, so a decoder caches the mixed values and the first layer's are computed in the same
step from the same tokens (no state beyond the KV cache). ``learned``: lam = sigmoid(x W_mix +
b_mix), one per token and key/value head from the attention's input (x-transformers'
``learned_value_residual_mix``); a number: lam fixed (x-transformers' 0.5 without it).

``residual_scores`` (He et al. 2020, RealFormer, eq. 3): the previous self-attention's logits,
as they entered its softmax (masked, before top-k), are added to this layer's q·k / sqrt(d_k),
before the position terms and score modifiers (x-transformers' ``residual_attn``). In a decoding
step the previous layer's logits for the new queries are computed in the same step, over the
same cached keys. Both layers must see the same keys: same kind, heads and learned keys.

An IR node has one output, so the source's tensor travels in the call's ``published`` dict
(``RunContext`` in PyTorch, the emitted graph's cache in ONNX), keyed by the source's node name,
which the reader's attrs name (``values_from``, ``scores_from``); the source's attrs say it
publishes (``publishes_values``, ``publishes_scores``). A source precedes its readers in the IR.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

VALUE_RESIDUAL = Literal["learned"] | Annotated[float, Field(ge=0, le=1)] | None


def fields() -> dict:
    """The attention fields of this module, for ``create_model``."""
    return {
        "value_residual": (VALUE_RESIDUAL, Field(None, description=(
            "This layer's values mixed with its stack's first self-attention's, lam v + (1 - lam) v_1 (value "
            "residual learning, Zhou et al. 2024, eq. 3; x-transformers' add_value_residual): 'learned' for lam = "
            "sigmoid(x W_mix + b_mix) per token and key/value head (learned_value_residual_mix), or a fixed lam "
            "in [0, 1]. The stack's first self-attention is the source and mixes nothing. None: its own values "
            "(§3.2)."))),
        "residual_scores": (bool, Field(False, description=(
            "The previous self-attention's pre-softmax logits added to this layer's scaled q·k (residual "
            "attention, RealFormer, He et al. 2020, eq. 3; x-transformers' residual_attn); rules out fused "
            "kernels in both layers. Off: each layer's own logits (§3.2.1)."))),
    }


def self_attentions(plan) -> list[tuple[str, object]]:
    """(node name, resolved layer) of every self-attention of a stack's plan, bottom to top."""
    return [(name, s) for layer in plan for s, name in zip(layer.sublayers, layer.names)
            if s.component == "attention" and not s.needs_memory]


def links(plan, name: str) -> dict:
    """The node attrs stating what self-attention ``name`` of ``plan`` reads from earlier layers
    and publishes for later ones (module docstring); empty when it takes part in neither."""
    found = self_attentions(plan)
    names = [n for n, _ in found]
    if name not in names:
        return {}
    at, layers = names.index(name), [s for _, s in found]
    out = {}
    if any(s.value_residual is not None for s in layers[1:]):
        if at == 0:
            out["publishes_values"] = True
        elif layers[at].value_residual is not None:
            out["values_from"] = names[0]
    if at > 0 and layers[at].residual_scores:
        out["scores_from"] = names[at - 1]
    if at + 1 < len(layers) and layers[at + 1].residual_scores:
        out["publishes_scores"] = True
    return out


def stack_problem(spec, stack: str) -> tuple[str, str] | None:
    """(field, message) where a stack's layers cannot hand each other values or logits."""
    plan = spec.plan(stack)
    found = self_attentions(plan)
    uses = [(n, s) for layer in plan for s, n in zip(layer.sublayers, layer.names)
            if getattr(s, "value_residual", None) is not None or getattr(s, "residual_scores", False)]
    if not uses:
        return None
    for name, layer in uses + found[:1]:  # the readers, and the source of the first values
        field = "value_residual" if getattr(layer, "value_residual", None) is not None else "residual_scores"
        if layer.needs_memory or layer.op != "attention":
            return f"{stack}.{field}", (f"{name}: {field} links self-attention layers computed by the attention "
                                        f"op; {layer.kind} is not one: remove {field}")
    field = "value_residual" if uses[0][1].value_residual is not None else "residual_scores"
    if all(getattr(s, field) in (None, False) for _, s in found[1:]):
        return f"{stack}.{field}", (f"{field} is set on the stack's first self-attention alone, which has no "
                                    "earlier layer to read from: set it on the later layers")
    if any(layer.owner != layer.index for layer in plan):
        return f"{stack}.{field}", (f"{field} links a stack's layers, but this stack shares weights across depth "
                                    "(shared or share_layers): the first layer would be both source and reader")
    for (name, layer), (_, before) in zip(found[1:], found):
        first = found[0][1]
        if layer.value_residual is not None and (layer.kv_heads, layer.d_v) != (first.kv_heads, first.d_v):
            return f"{stack}.value_residual", (
                f"{name} mixes its values (kv_heads {layer.kv_heads}, d_v {layer.d_v}) with the first "
                f"self-attention's (kv_heads {first.kv_heads}, d_v {first.d_v}): make them equal")
        same = (layer.kind, layer.heads, layer.learned_kv, layer.band()) == \
            (before.kind, before.heads, before.learned_kv, before.band())
        if layer.residual_scores and not same:
            return f"{stack}.residual_scores", (
                f"{name} adds the previous self-attention's logits, which must score the same keys with as many "
                f"heads: {before.kind} (heads {before.heads}) before {layer.kind} (heads {layer.heads})")
    return None


def params(layer, link: dict, d: int) -> dict:
    """The learned mix's IR parameters, (g, d) and (g,), for a layer that reads the first values
    with lam learned from its d-wide input."""
    if "values_from" not in link or layer.value_residual != "learned":
        return {}
    return {"w_mix": ((layer.kv_heads, d), "xavier_uniform"), "b_mix": ((layer.kv_heads,), "zeros")}


def unfused(attrs) -> bool:
    """Whether residual attention spells this node's scores out: it reads or publishes logits."""
    return bool(attrs.get("scores_from") or attrs.get("publishes_scores"))


def flops(s, layer) -> dict:
    """The learned mix's projection, 2 n d g (lerp and sigmoid are elementwise)."""
    link = layer._links or {}
    if "values_from" in link and layer.value_residual == "learned":
        return {"value_mix": 2 * s.n * s.d * s.g}
    return {}
