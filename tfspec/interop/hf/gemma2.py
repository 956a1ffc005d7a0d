"""Gemma 2 (``model_type: gemma2``): transformers' Gemma2ForCausalLM and Gemma2Model as tfspec
specs (google/gemma-2-2b, gemma-2-9b, gemma-2-27b and their -it versions).

Gemma (``gemma.py``: 256-wide heads, a gated tanh GELU, embeddings scaled by sqrt(hidden_size),
the output tied, RMSNorms computing x * (1 + w)) with these differences:

- each sub-layer's output is normalised too before it joins the residual stream (``norm:
  sandwich``): input_layernorm and post_attention_layernorm around attention,
  pre_feedforward_layernorm and post_feedforward_layernorm around the MLP;
- attention logits are soft-capped, c * tanh(s / c) before the mask (``attn_logit_softcapping``,
  50: the attention's ``softcap``), and so are the output logits (``final_logit_softcapping``,
  30: ``output_softcap``);
- scores are scaled by query_pre_attn_scalar^-0.5 (the attention's ``scale``; gemma-2-27b's is
  144, not its 128-wide heads);
- layers attend as ``layer_types`` says: sliding-window layers (the last ``sliding_window``
  tokens: causal restricted attention, r = sliding_window - 1) and global ones, alternating from
  a sliding first layer where a configuration lists none; a stack of groups, which ``export
  --format hf`` writes back as ``layer_types``;
- the activation is ``hidden_activation``, named as transformers' ACT2FN names it ("gelu" is
  exact GELU here); transformers never reads Gemma 2's ``hidden_act``.

Refused by name, besides Gemma's refusals: rope types other than default. Defaults are
Gemma2Config's (gemma-2-2b's shape).
"""

from __future__ import annotations

from dataclasses import replace
from itertools import groupby

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import ACTIVATION_NAMES, Rule, Source, _show, activation, number, register
from tfspec.interop.hf.gemma import Gemma
from tfspec.interop.hf.layouts import PlusOne

LAYER_TYPES = ("sliding_attention", "full_attention")
"""transformers' names for a sliding-window layer and a global one."""


@register
class Gemma2(Gemma):
    model_type = "gemma2"
    title = "Gemma 2"
    architectures = {"Gemma2ForCausalLM": "model.", "Gemma2Model": ""}
    export_architecture = "Gemma2ForCausalLM"
    mapped = tuple(f for f in Gemma.mapped if f != "hidden_act") + (
        "query_pre_attn_scalar", "sliding_window", "layer_types", "attn_logit_softcapping", "final_logit_softcapping")
    ignored = {"hidden_act": "transformers computes hidden_activation and never reads this (gemma-2's configs "
                             "write both)",
               "cache_implementation": "how transformers caches keys and values while generating",
               "sliding_window_size": "an early name of sliding_window (gemma-2 configs of transformers 4.42) that "
                                      "transformers no longer reads"}
    grouped = True
    rope_types = ("default",)
    defaults = Gemma.defaults | {
        "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
        "num_key_value_heads": 4, "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256,
        "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
    """Gemma2Config's values where Gemma's differ (those ``spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        data = super().spec_data(source)
        kinds = self._layer_kinds(c, where, data["decoder"]["layers"])
        return data | {"norm": "sandwich", "output_softcap": _cap(c, "final_logit_softcapping", where),
                       "decoder": {"groups": [{"layers": len(list(run)),
                                               "block": [self._layer(kind, c, where, data["d_k"]), "ffn"]}
                                              for kind, run in groupby(kinds)]}}

    def _activation(self, c: dict, where: str) -> str:
        return activation(c, "hidden_activation", where, "gelu_pytorch_tanh")

    def _layer_kinds(self, c: dict, where: str, layers: int) -> list[str]:
        """``layer_types``, one a layer; when absent, sliding from the first layer on every other."""
        kinds = c["layer_types"] if c.get("layer_types") is not None else [LAYER_TYPES[i % 2] for i in range(layers)]
        return _checked_kinds(kinds, where, layers)

    def _layer(self, kind: str, c: dict, where: str, d_k: int) -> dict:
        """The attention of a ``kind`` layer: causal, restricted to the window if sliding, its
        scores scaled by query_pre_attn_scalar^-0.5 (left unset where that is 1 / sqrt(d_k)) and capped."""
        scalar = _positive(c, "query_pre_attn_scalar", where, int)
        cap = _cap(c, "attn_logit_softcapping", where)
        attention = ({"kind": "causal_self_attention"} if kind == "full_attention" else
                     {"kind": "restricted_self_attention", "r": _positive(c, "sliding_window", where, int) - 1,
                      "causal": True})
        return attention | ({"scale": scalar ** -0.5} if scalar != d_k else {}) | (
            {"softcap": cap} if cap is not None else {})

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Gemma's, the MLP's input norm under its Gemma 2 name, and the norms after each sub-layer."""
        rules = []
        for rule in super().rules(spec, architecture):
            if rule.ir.endswith(".ffn_norm.weight"):
                ours = rule.ir.removesuffix("ffn_norm.weight")
                theirs = rule.hf[0].removesuffix("post_attention_layernorm.weight")
                rules += [Rule(f"{ours}self_attn_out_norm.weight", (f"{theirs}post_attention_layernorm.weight",),
                               PlusOne()),
                          Rule(f"{ours}ffn_out_norm.weight", (f"{theirs}post_feedforward_layernorm.weight",),
                               PlusOne())]
                rule = replace(rule, hf=(f"{theirs}pre_feedforward_layernorm.weight",))
            rules.append(rule)
        return rules

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if spec.norm != "sandwich":
            return f"{self.title} normalises each sub-layer's input and output (norm: sandwich), not {spec.norm}"
        if any(layer.attention is None or layer.ffn is None for layer in spec.plan("decoder")):
            return f"each {self.title} layer is self-attention, then a feed-forward layer"
        return None

    def config(self, spec) -> dict:
        """Gemma's fields (less ``hidden_act``) and each layer's kind, window, scale and caps."""
        plan = spec.plan("decoder")
        attention, act = [layer.attention for layer in plan], plan[0].ffn.activation
        windows = [a.r + 1 for a in attention if a.kind == "restricted_self_attention"]
        return {k: v for k, v in super().config(spec).items() if k != "hidden_act"} | {
            "hidden_activation": "gelu_pytorch_tanh" if act == "gelu_tanh" else ACTIVATION_NAMES.get(act, act),
            "layer_types": [LAYER_TYPES[a.kind != "restricted_self_attention"] for a in attention],
            "sliding_window": windows[0] if windows else self.defaults["sliding_window"],
            "query_pre_attn_scalar": max(1, round(attention[0].score_scale(attention[0].d_k) ** -2)),
            "attn_logit_softcapping": attention[0].softcap, "final_logit_softcapping": spec.output_softcap}


def _checked_kinds(kinds, where: str, layers: int) -> list[str]:
    if not isinstance(kinds, list) or any(kind not in LAYER_TYPES for kind in kinds):
        raise TfspecError(f"{where}: layer_types: {_show(kinds)} is not supported; tfspec reads a list of "
                          f"{' or '.join(LAYER_TYPES)}, one a layer")
    if len(kinds) != layers:
        raise TfspecError(f"{where}: layer_types gives {len(kinds)} layers; num_hidden_layers is {layers}")
    return kinds


def _positive(c: dict, key: str, where: str, kind=float):
    value = number(c, key, where, kind)
    if value <= 0:
        raise TfspecError(f"{where}: {key} must be positive, got {_show(value)}")
    return value


def _cap(c: dict, key: str, where: str) -> float | None:
    """A soft-capping constant c (logits to c * tanh(logits / c)), or None for none."""
    return None if c.get(key) is None else _positive(c, key, where)
