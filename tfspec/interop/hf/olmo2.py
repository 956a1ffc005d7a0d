"""OLMo 2 (``model_type: olmo2``): transformers' Olmo2ForCausalLM and Olmo2Model as tfspec specs
(allenai/OLMo-2-1124-7B, -13B, OLMo-2-0325-32B, OLMo-2-0425-1B and their -Instruct models).

Llama (``llama.py``: RMSNorm, SwiGLU, rotary positions, grouped-query attention) with two
differences: each sub-layer's RMSNorm normalises its output before it joins the residual stream,
x + Norm(f(x)), not its input (``norm: output``; stored as ``post_attention_layernorm`` and
``post_feedforward_layernorm``), the final norm kept; and an RMSNorm over the whole query
(heads x head_dim) and key (kv_heads x head_dim) projections before the rotation, a gain per
feature (``qk_norm: all``). ``attention_bias`` biases q, k, v and o; the MLP is never biased
(``mlp_bias`` is refused as unknown). Defaults are Olmo2Config's (OLMo-2-1124-7B's shape with
OLMo 1's 50304-token vocabulary, rotary base and 2048 positions).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.interop.hf.family import Rule, Source, register
from tfspec.interop.hf.llama import Llama
from tfspec.interop.hf.qwen3 import qk_norm_rules

NORMS = {"self_attn_norm.weight": "post_attention_layernorm", "ffn_norm.weight": "post_feedforward_layernorm"}
"""A sub-layer's norm -> the name of the one OLMo 2 applies to that sub-layer's output."""


@register
class Olmo2(Llama):
    model_type = "olmo2"
    title = "OLMo 2"
    architectures = {"Olmo2ForCausalLM": "model.", "Olmo2Model": ""}
    export_architecture = "Olmo2ForCausalLM"
    mapped = tuple(f for f in Llama.mapped if f != "mlp_bias")
    ignored = Llama.ignored | {"clip_qkv": "OLMo 1's clipping of q, k and v, which transformers' OLMo 2 never applies"}
    defaults = {"vocab_size": 50304, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "pad_token_id": 1,
                "eos_token_id": 50279}
    """Olmo2Config's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        return super().spec_data(replace(source, config=self.defaults | source.config)) | {"norm": "output"}

    def _attention(self, c: dict, where: str):
        return {"kind": "causal_self_attention", "qk_norm": "all"}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Llama's rules with each sub-layer's norm read from the one on its output."""
        rules = []
        for rule in super().rules(spec, architecture) + qk_norm_rules(spec):
            suffix = next((s for s in NORMS if rule.ir.endswith(s)), None)
            if suffix is not None:
                rule = Rule(rule.ir, (f"{rule.hf[0].rsplit('.', 2)[0]}.{NORMS[suffix]}.weight",))
            rules.append(rule)
        return rules

    def _config_biases(self, spec) -> dict:
        return {"attention_bias": spec.has_bias("q")}
