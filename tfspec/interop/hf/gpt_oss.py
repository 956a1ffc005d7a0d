"""gpt-oss (``model_type: gpt_oss``): transformers' GptOssForCausalLM and GptOssModel as tfspec
specs (openai/gpt-oss-20b, gpt-oss-120b).

A pre-RMSNorm decoder of grouped-query attention and mixtures of experts, as Mixtral
(``mixtral.py``), with these differences:

- every attention layer has sinks (``self_attn.sinks``: a learned logit per head that joins the
  softmax's denominator, the attention's ``sinks``) and biased q, k, v and o projections
  (``attention_bias``, true by default);
- layers attend as ``layer_types`` says: sliding-window layers (the last ``sliding_window``
  tokens: causal restricted attention, r = sliding_window - 1) and full ones, alternating from
  a sliding first layer where a configuration lists none (Gemma 2's rule, ``gemma2.py``);
- the router has a bias and takes the softmax of the top_k logits (the renormalised softmax
  of all of them: ``normalize``); its experts' three linear layers have biases and compute a
  clamped SwiGLU, (clamp(x W3 + b3, -c, c) + 1) * g sigmoid(1.702 g) with g = min(x W1 + b1,
  c) (the ``moe``'s ``glu_limit`` c = swiglu_limit, ``glu_shift`` 1, activation
  ``quick_gelu``). transformers stores the experts fused: ``gate_up_proj`` (E, d, 2f) with the
  gate's and the linear branch's columns alternating, ``down_proj`` (E, f, d) (the rules'
  ``Interleave`` and ``Transpose`` layouts);
- rotary positions default to YaRN (factor 32 over 4096 positions, unclamped ramp), theta 150000.

The published weights are MXFP4 (``quantization_config: {quant_method: mxfp4}``, the experts'
matrices as ``*_blocks`` and ``*_scales``): read as transformers dequantizes them (``mxfp4.py``),
one tensor at a time; checkpoints saved unquantized (bf16, float32) import as they are.

Refused by name: a ``swiglu_alpha`` other than 1.702 (tfspec's quick_gelu gain) and any other
``quantization_config``. Defaults are GptOssConfig's (gpt-oss-120b's shape, 36 layers of 128 experts).
"""

from __future__ import annotations

from dataclasses import replace
from itertools import groupby

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Rule, Source, _show, number, register
from tfspec.interop.hf.gemma2 import LAYER_TYPES, _checked_kinds
from tfspec.interop.hf.layouts import Interleave, Transpose
from tfspec.interop.hf.llama import Llama
from tfspec.interop.hf.mixtral import MOE_IGNORED, Experts, _counted, first_moe
from tfspec.interop.hf.mxfp4 import METHOD

ALPHA = 1.702
"""The gate's sigmoid gain tfspec computes (quick_gelu): GptOssConfig's swiglu_alpha."""


@register
class GptOss(Experts, Llama):
    model_type = "gpt_oss"
    title = "gpt-oss"
    architectures = {"GptOssForCausalLM": "model.", "GptOssModel": ""}
    export_architecture = "GptOssForCausalLM"
    mapped = tuple(f for f in Llama.mapped if f not in ("mlp_bias", "hidden_act")) + (
        "num_local_experts", "num_experts", "num_experts_per_tok", "sliding_window", "layer_types", "swiglu_limit")
    required = {"swiglu_alpha": (ALPHA,)}
    ignored = Llama.ignored | MOE_IGNORED | {
        "hidden_act": "transformers' gpt-oss experts compute their clamped SwiGLU and never read it",
        **dict.fromkeys(("experts_per_token", "initial_context_length"),
                        "left over from OpenAI's own configuration (gpt-oss-20b's config.json); transformers "
                        "reads num_experts_per_tok and rope_scaling's original_max_position_embeddings")}
    expert_counts = ("num_local_experts", "num_experts")
    quantized = (METHOD,)
    renormalises = True
    grouped = True
    defaults = {"vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880, "head_dim": 64,
                "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8,
                "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "attention_bias": True,
                "sliding_window": 128, "num_local_experts": 128, "num_experts_per_tok": 4, "swiglu_limit": 7.0,
                "rope_theta": 150000.0, "bos_token_id": None, "eos_token_id": None,
                "rope_parameters": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                    "truncate": False, "original_max_position_embeddings": 4096}}
    """GptOssConfig's values (its __post_init__ fills rope_parameters so when unset)."""

    def spec_data(self, source: Source) -> dict:
        c = self.defaults | _counted(source.config, self.expert_counts, source.where)
        where = source.where
        data = Llama.spec_data(self, replace(source, config={k: v for k, v in c.items() if k != "hidden_act"}))
        layers = data["decoder"]["layers"]
        kinds = c["layer_types"] if c.get("layer_types") is not None else [LAYER_TYPES[i % 2] for i in range(layers)]
        moe = self._moe(c, where) | {"bias": True, "router_bias": True, "glu_limit": self._limit(c, where),
                                     "glu_shift": 1.0}
        groups = [{"layers": len(list(run)), "block": [self._layer(kind, c, where), dict(moe)]}
                  for kind, run in groupby(_checked_kinds(kinds, where, layers))]
        return data | {"activation": "quick_gelu", "decoder": {"groups": groups}}

    def _limit(self, c: dict, where: str) -> float:
        limit = number(c, "swiglu_limit", where, float)
        if limit <= 0:
            raise TfspecError(f"{where}: swiglu_limit must be positive, got {_show(limit)}")
        return limit

    def _layer(self, kind: str, c: dict, where: str) -> dict:
        """A ``kind`` layer's attention, with sinks: causal, restricted to the window if sliding
        (a window reaching every position is causal attention, as Mistral's)."""
        if kind == "full_attention":
            return {"kind": "causal_self_attention", "sinks": True}
        window = number(c, "sliding_window", where)
        if window < 1:
            raise TfspecError(f"{where}: sliding_window must be positive, got {_show(window)}")
        if window >= number(c, "max_position_embeddings", where):
            return {"kind": "causal_self_attention", "sinks": True}
        return {"kind": "restricted_self_attention", "r": window - 1, "causal": True, "sinks": True}

    def rules(self, spec, architecture: str) -> list[Rule]:
        return super().rules(spec, architecture) + [
            Rule(f"decoder.layers.{layer.index}.self_attn.sinks", (f"layers.{layer.index}.self_attn.sinks",))
            for layer in spec.plan("decoder")]

    def _moe_rules(self, i: int, name: str, moe) -> list[Rule]:
        theirs = f"layers.{i}.mlp."
        fused, bias = f"{theirs}experts.gate_up_proj", f"{theirs}experts.gate_up_proj_bias"
        return [Rule(f"{name}_norm.weight", (f"layers.{i}.post_attention_layernorm.weight",)),
                Rule(f"{name}.w_router", (f"{theirs}router.weight",)),
                Rule(f"{name}.b_router", (f"{theirs}router.bias",)),
                Rule(f"{name}.w_1", (fused,), Interleave(0)), Rule(f"{name}.w_3", (fused,), Interleave(1)),
                Rule(f"{name}.b_1", (bias,), Interleave(0)), Rule(f"{name}.b_3", (bias,), Interleave(1)),
                Rule(f"{name}.w_2", (f"{theirs}experts.down_proj",), Transpose()),
                Rule(f"{name}.b_2", (f"{theirs}experts.down_proj_bias",))]

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if any(len(layer.sublayers) != 2 or layer.attention is None or layer.sublayers[1].kind != "moe"
               for layer in spec.plan("decoder")):
            return f"each {self.title} layer is self-attention, then a mixture of experts"
        return None

    def config(self, spec) -> dict:
        """Llama's fields and the experts' (from the first layer), each layer's kind and window,
        the clamp; no mlp_bias or hidden_act, which GptOssConfig does not have or read."""
        attention = [layer.attention for layer in spec.plan("decoder")]
        windows = [a.r + 1 for a in attention if a.kind == "restricted_self_attention"]
        config = {k: v for k, v in super().config(spec).items() if k not in ("mlp_bias", "hidden_act")}
        return config | {"layer_types": [LAYER_TYPES[a.kind != "restricted_self_attention"] for a in attention],
                         "sliding_window": windows[0] if windows else spec.positional.max_len,
                         "swiglu_limit": first_moe(spec).glu_limit, "swiglu_alpha": ALPHA}
