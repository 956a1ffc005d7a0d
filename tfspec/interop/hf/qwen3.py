"""Qwen3 (``model_type: qwen3``): transformers' Qwen3ForCausalLM and Qwen3Model as tfspec specs
(Qwen/Qwen3-0.6B .. Qwen3-32B, and their -Base models).

Qwen2 (``llama.py``: pre-RMSNorm, SwiGLU, grouped-query attention, rotary positions; a sliding
window refused by name) with three differences: an RMSNorm on each head's queries and keys
before the rotation, one ``head_dim`` gain shared by the heads (``qk_norm: head``: ``q_norm``,
``k_norm``); q, k, v and o biased together by ``attention_bias`` (false in every published
Qwen3), as Llama's attention does, where Qwen2 always biases q, k and v; and ``head_dim`` (128
unless said) independent of hidden_size / heads: Qwen3-0.6B's 16 heads are 2048 wide under a
1024-wide model. Its MLP is never biased: ``mlp_bias`` is refused as unknown. Defaults are
Qwen3Config's (Qwen3-8B's shape, with Llama 2's 32 key/value heads and 22016-wide MLP).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Rule, Source, _show, register
from tfspec.interop.hf.llama import Llama, Qwen2


@register
class Qwen3(Qwen2):
    model_type = "qwen3"
    title = "Qwen3"
    architectures = {"Qwen3ForCausalLM": "model.", "Qwen3Model": ""}
    export_architecture = "Qwen3ForCausalLM"
    mapped = tuple(f for f in Llama.mapped if f != "mlp_bias") + ("layer_types",)
    ignored = {k: v for k, v in Qwen2.ignored.items() if k != "layer_types"}
    defaults = {"vocab_size": 151936, "intermediate_size": 22016, "head_dim": 128, "max_position_embeddings": 32768}
    """Qwen3Config's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""
    qk_norm = "head"

    def spec_data(self, source: Source) -> dict:
        data = super().spec_data(replace(source, config=self.defaults | source.config))
        full_attention_only(source.config, source.where, data["decoder"]["layers"], self.title)
        return data

    _biases = Llama._biases  # attention_bias: q, k, v and o alike

    def _attention(self, c: dict, where: str):
        return {"kind": "causal_self_attention", "qk_norm": self.qk_norm}

    def rules(self, spec, architecture: str) -> list[Rule]:
        return super().rules(spec, architecture) + qk_norm_rules(spec)

    def _config_biases(self, spec) -> dict:
        return super()._config_biases(spec) | {"attention_bias": spec.has_bias("q")}


def qk_norm_rules(spec) -> list[Rule]:
    """The query and key norms' gains of every attention layer that has them (``self_attn.q_norm``,
    ``k_norm``: Qwen3's per head, OLMo 2's over the whole projection: named alike)."""
    return [Rule(f"{name}.{part}_norm", (f"layers.{layer.index}.self_attn.{part}_norm.weight",))
            for layer in spec.plan("decoder") for name, sub in zip(layer.names, layer.sublayers)
            if getattr(sub, "qk_norm", "none") != "none" for part in "qk"]


def full_attention_only(c: dict, where: str, layers: int, title: str) -> None:
    """Refuse ``layer_types`` unless it lists full_attention for every layer: sliding_attention
    layers (a sliding window, which no published Qwen3 or SmolLM3 uses) are not imported."""
    types = c.get("layer_types")
    if types is not None and (not isinstance(types, list) or len(types) < layers
                              or any(t != "full_attention" for t in types[:layers])):
        raise TfspecError(f"{where}: layer_types: {_show(types)} is not supported; tfspec imports {title} with "
                          "every layer full_attention")
