"""GLM and GLM-4 (``model_type: glm | glm4``): transformers' GlmForCausalLM, GlmModel,
Glm4ForCausalLM and Glm4Model as tfspec specs (THUDM/glm-4-9b-hf, glm-4-9b-chat-hf,
GLM-4-9B-0414, GLM-Z1-9B-0414, GLM-4-32B-0414).

Phi-3 (``phi3.py``: Llama with the MLP's gate and up projections stored as one
``gate_up_proj``) with separate q, k and v projections, biased when ``attention_bias`` (true by
default; the output projection never is), and rotary positions on the first
``partial_rotary_factor`` (0.5 unless said) of each head's features rotating interleaved pairs
(x_0, x_1), (x_2, x_3), ... (``cohere.InterleavedRotary`` permutes the query and key rows to
tfspec's rotate-half). GLM-4 adds a norm after each sub-layer before it joins the residual
(``post_self_attn_layernorm``, ``post_mlp_layernorm``: ``norm: sandwich``). Defaults are
GlmConfig's and Glm4Config's (glm-4-9b's shape, eos the list of three chat end tokens).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.interop.hf.cohere import interleaved
from tfspec.interop.hf.family import Rule, Source, flag, register
from tfspec.interop.hf.llama import Llama
from tfspec.interop.hf.phi3 import Phi3
from tfspec.interop.hf.stablelm import with_rotated_share

PARTIAL_ROTARY = 0.5
"""GlmConfig's partial_rotary_factor when a configuration leaves it out."""


@register
class Glm(Phi3):
    model_type = "glm"
    title = "GLM"
    architectures = {"GlmForCausalLM": "model.", "GlmModel": ""}
    export_architecture = "GlmForCausalLM"
    export_rank = 1  # without attention_bias its specs are Phi-3's
    mapped = tuple(f for f in Llama.mapped if f != "mlp_bias") + ("partial_rotary_factor",)
    ignored = {}
    defaults = {"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 13696, "num_hidden_layers": 40,
                "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
                "max_position_embeddings": 131072, "rms_norm_eps": 1.5625e-07, "pad_token_id": 151329,
                "eos_token_id": [151329, 151336, 151338], "bos_token_id": None, "attention_bias": True}
    """GlmConfig's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        return Llama.spec_data(self, replace(source, config=self.defaults | source.config))

    def _biases(self, c: dict, where: str) -> dict:
        qkv = flag(c, "attention_bias", where, True)
        return {"q": qkv, "k": qkv, "v": qkv, "o": False, "ffn": False}

    def _rotary(self, c: dict, where: str) -> dict:
        return Llama._rotary(self, with_rotated_share(c, PARTIAL_ROTARY, where), where)

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Phi-3's split MLP, Llama's q, k and v (their rotary rows interleaved)."""
        llama = {r.ir: r for r in Llama.rules(self, spec, architecture)}
        return interleaved([llama[r.ir] if r.ir.endswith(".w_qkv") else r for r in super().rules(spec, architecture)],
                           spec)

    def config(self, spec) -> dict:
        shared = {k: v for k, v in super().config(spec).items() if k in self.mapped + ("architectures", "model_type")}
        return shared | {"attention_bias": spec.has_bias("q")}


@register
class Glm4(Glm):
    model_type = "glm4"
    title = "GLM-4"
    architectures = {"Glm4ForCausalLM": "model.", "Glm4Model": ""}
    export_architecture = "Glm4ForCausalLM"

    def spec_data(self, source: Source) -> dict:
        return super().spec_data(source) | {"norm": "sandwich"}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """GLM's, with the norms after attention and MLP."""
        return super().rules(spec, architecture) + [
            Rule(f"{ours}_out_norm.weight", (f"layers.{layer.index}.{theirs}.weight",))
            for layer in spec.plan("decoder")
            for ours, theirs in zip(layer.names, ("post_self_attn_layernorm", "post_mlp_layernorm"))]
