"""DeepSeek-V2 (``model_type: deepseek_v2``): transformers' DeepseekV2ForCausalLM and
DeepseekV2Model as tfspec specs (deepseek-ai/DeepSeek-V2-Lite and its -Chat model).

Llama (``llama.py``: pre-RMSNorm, SwiGLU, rotary positions) with two differences. Attention
is multi-head latent attention (tfspec's ``latent_attention`` layer, fields named as the
config's: q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim), whose
decoding cache holds kv_lora_rank + qk_rope_head_dim values per position. Layers from
``first_k_dense_replace`` on are mixtures of ``n_routed_experts`` experts
``moe_intermediate_size`` wide (``mixtral.py``'s ``Experts``): each token runs the
``num_experts_per_tok`` its softmax router scores highest, weighted by those probabilities as
they are (DeepSeek-V2 never renormalises: ``norm_topk_prob`` is not read), plus
``n_shared_experts`` ungated shared experts on every token; the layers before are dense SwiGLU
``intermediate_size`` wide.

DeepSeek rotates the rope features in interleaved pairs (x_0, x_1), (x_2, x_3), ...; tfspec's
rotary rotates halves (x_i, x_{i+r/2}). The rows of each head's rope features in q_proj (or
q_b_proj) and kv_a_proj_with_mqa are permuted at import, even ones first, then odd ones
(``RotaryPairs``), and back at export: scores are sums over features, so the model computes
the same thing. Rope scaling imports as Llama's (``rope.py``: DeepSeek-V2's published yarn);
with a scaled type and ``mscale_all_dim`` set, transformers also multiplies the softmax scale
by mscale(factor, mscale_all_dim)^2 (``yarn_apply_mscale``), the layer's ``scale`` here.
Refused by name: routing other than ``greedy`` (DeepSeek-V2's group_limited_greedy), a
routed_scaling_factor other than 1, biases, and values of DeepSeek's own code's ``scoring_func``
and ``moe_layer_freq`` other than what transformers computes without reading them. Defaults are DeepseekV2Config's (num_experts_per_tok has none:
it must be given).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Rule, Source, number, register
from tfspec.interop.hf.layouts import Layout
from tfspec.interop.hf.llama import Llama
from tfspec.interop.hf.mixtral import MOE_IGNORED, Experts, first_moe
from tfspec.ir.rope_scaling import yarn_mscale

MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
"""The configuration's latent attention fields, named as the layer's."""


def _softmax_scale(c: dict, d_k: int, where: str) -> float | None:
    """transformers' ``yarn_apply_mscale``: d_k^-0.5 times mscale(factor, mscale_all_dim)^2 when
    the rope type is not default and mscale_all_dim is set (DeepSeek-V2: 0.707, V3: 1.0, both
    factor 40); None (d_k^-0.5) otherwise."""
    rope = c.get("rope_scaling") or c.get("rope_parameters") or {}
    if not isinstance(rope, dict) or rope.get("rope_type", rope.get("type", "default")) == "default":
        return None
    if not rope.get("mscale_all_dim"):
        return None
    inside = f"{where}: rope_scaling"
    mscale = yarn_mscale(number(rope, "factor", inside, float), number(rope, "mscale_all_dim", inside, float))
    return d_k ** -0.5 * mscale * mscale


@dataclass(frozen=True)
class RotaryPairs(Layout):
    """A projection whose rows come in blocks of ``block`` (one per head) ending in ``rope``
    rotary rows stored in DeepSeek's interleaved pairs: the IR holds each block's rope rows
    even ones first, then odd ones (tfspec's rotate-half layout)."""

    block: int
    rope: int

    def _order(self, rows: int) -> np.ndarray:
        index = np.arange(rows).reshape(-1, self.block)
        pe = index[:, self.block - self.rope:]
        return np.concatenate([index[:, :self.block - self.rope], pe[:, 0::2], pe[:, 1::2]], 1).ravel()

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        return parts[0][self._order(len(parts[0]))]

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return [value[np.argsort(self._order(len(value)))]]


@register
class DeepseekV2(Experts, Llama):
    model_type = "deepseek_v2"
    title = "DeepSeek-V2"
    architectures = {"DeepseekV2ForCausalLM": "model.", "DeepseekV2Model": ""}
    export_architecture = "DeepseekV2ForCausalLM"
    grouped = True
    mapped = tuple(f for f in Llama.mapped if f not in ("attention_bias", "mlp_bias", "head_dim")) + MLA_FIELDS + (
        "n_routed_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
        "first_k_dense_replace")
    required = {"attention_bias": (False,), "mlp_bias": (False,), "topk_method": ("greedy",),
                "routed_scaling_factor": (1.0,), "scoring_func": ("softmax",), "moe_layer_freq": (1,)}
    """Beyond Llama's: the router transformers computes, and two fields of DeepSeek's own code
    that transformers never reads (scoring_func, moe_layer_freq), accepted where their value says
    what transformers computes anyway (DeepSeek-V2-Lite's softmax, every layer after the dense ones)."""
    ignored = Llama.ignored | MOE_IGNORED | {
        **dict.fromkeys(("head_dim", "qk_head_dim"), "set by transformers from qk_rope_head_dim and qk_nope_head_dim, "
                        "whatever the file says"),
        **dict.fromkeys(("n_group", "topk_group"), "read only by topk_method group_limited_greedy, which must be "
                        "greedy"),
        "norm_topk_prob": "DeepSeek-V2's greedy router never reads it: the top-k probabilities are not renormalised",
        **dict.fromkeys(("aux_loss_alpha", "seq_aux"), "the weight and kind of DeepSeek's own code's balance loss: "
                        "training only, and transformers' class does not read it"),
        "ep_size": "how many devices share the experts (expert parallelism), not what they compute"}
    expert_counts = ("n_routed_experts", "num_experts")
    renormalises = False
    routing = Experts.routing | {"normalize": False}
    defaults = {"vocab_size": 102400, "n_routed_experts": 64, "n_shared_experts": 2, "moe_intermediate_size": 1407,
                "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                "v_head_dim": 128, "bos_token_id": 1, "eos_token_id": 2}

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        heads = number(c, "num_attention_heads", where, default=32)
        if number(c, "num_key_value_heads", where, default=heads) != heads:
            raise TfspecError(f"{where}: num_key_value_heads ({c['num_key_value_heads']}) must equal "
                              f"num_attention_heads ({heads}): latent attention decodes keys and values for every head")
        attention = self._attention(c, where)  # the model-wide sizes the layers' plans resolve to
        return super().spec_data(source) | {"kv_heads": heads, "d_v": attention["v_head_dim"],
                                            "d_k": attention["qk_nope_head_dim"] + attention["qk_rope_head_dim"]}

    def _attention(self, c: dict, where: str):
        c = self.defaults | c
        layer = {"kind": "latent_attention", **{k: number(c, k, where) for k in MLA_FIELDS if k != "q_lora_rank"}}
        if c.get("q_lora_rank") is not None:
            layer["q_lora_rank"] = number(c, "q_lora_rank", where)
        scale = _softmax_scale(c, layer["qk_nope_head_dim"] + layer["qk_rope_head_dim"], where)
        return layer if scale is None else layer | {"scale": scale}

    def _sparse(self, c: dict, where: str, layers: int) -> list[bool]:
        """Layer i is a mixture of experts from first_k_dense_replace on, as transformers' decoder layer decides."""
        first = number(c, "first_k_dense_replace", where, default=0)
        return [i >= first for i in range(layers)]

    def _moe(self, c: dict, where: str) -> dict:
        if c.get("num_experts_per_tok") is None:
            raise TfspecError(f"{where}: num_experts_per_tok is null (DeepseekV2Config leaves it unset and "
                              "transformers cannot route without it): set it (DeepSeek-V2-Lite: 6)")
        return super()._moe(c, where) | {"d_ff": number(c, "moe_intermediate_size", where),
                                         "shared": number(c, "n_shared_experts", where)}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """``Experts``' rules, the attention's replaced by latent attention's."""
        rules = [r for r in super().rules(spec, architecture) if not r.ir.split(".")[-1].startswith(("w_qkv", "w_o"))]
        for layer in spec.plan("decoder"):
            a, ours = layer.attention, f"decoder.layers.{layer.index}.self_attn."
            theirs = f"layers.{layer.index}.self_attn."
            width = a.qk_nope_head_dim + a.qk_rope_head_dim
            q = ("q", "q_proj") if a.q_lora_rank is None else ("qb", "q_b_proj")
            rules += [Rule(f"{ours}w_{q[0]}", (f"{theirs}{q[1]}.weight",), RotaryPairs(width, a.qk_rope_head_dim)),
                      Rule(f"{ours}w_kva", (f"{theirs}kv_a_proj_with_mqa.weight",),
                           RotaryPairs(a.kv_lora_rank + a.qk_rope_head_dim, a.qk_rope_head_dim)),
                      Rule(f"{ours}kv_norm", (f"{theirs}kv_a_layernorm.weight",)),
                      Rule(f"{ours}w_kvb", (f"{theirs}kv_b_proj.weight",)),
                      Rule(f"{ours}w_o", (f"{theirs}o_proj.weight",))]
            if a.q_lora_rank is not None:
                rules += [Rule(f"{ours}w_qa", (f"{theirs}q_a_proj.weight",)),
                          Rule(f"{ours}q_norm", (f"{theirs}q_a_layernorm.weight",))]
        return rules

    def _moe_rules(self, i: int, name: str, moe) -> list[Rule]:
        """Mixtral's, the shared experts under ``shared_experts`` (one network n_shared_experts x wide)."""
        return [replace(r, hf=tuple(h.replace(".shared_expert.", ".shared_experts.") for h in r.hf))
                for r in super()._moe_rules(i, name, moe)]

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        layers = spec.plan("decoder")
        if any(layer.attention is None or layer.attention.kind != "latent_attention" for layer in layers):
            return f"{self.title}'s attention layers are latent attention; this spec has others"
        sparse = [any(s.kind == "moe" for s in layer.sublayers) for layer in layers]
        if sparse != sorted(sparse) or first_moe(spec).shared_gate:
            return f"{self.title} has dense layers, then mixtures of experts (shared experts ungated)"
        return None

    def config(self, spec) -> dict:
        a, moe = spec.plan("decoder")[0].attention, first_moe(spec)
        config = {k: v for k, v in super().config(spec).items() if k not in ("head_dim", "attention_bias", "mlp_bias")}
        dense = sum(not any(s.kind == "moe" for s in layer.sublayers) for layer in spec.plan("decoder"))
        return config | {k: getattr(a, k) for k in MLA_FIELDS} | {
            "intermediate_size": spec.d_ff, "moe_intermediate_size": moe.d_ff, "n_shared_experts": moe.shared,
            "first_k_dense_replace": dense, "topk_method": "greedy"}
