"""OLMo (``model_type: olmo``): transformers' OlmoForCausalLM and OlmoModel as tfspec specs
(allenai/OLMo-1B-hf, OLMo-7B-hf, OLMo-7B-Twin-2T-hf, OLMo-7B-0424-hf).

Llama (``llama.py``: pre-norm, SwiGLU, rotary positions, grouped-query attention) whose norms
are LayerNorms without parameters, (x - mean) / sqrt(var + 1e-5), no gain and no shift
(``norm_gain: false``, ``norm_bias: false``; the epsilon is fixed: OlmoConfig has no field for
it). ``attention_bias`` biases q, k, v and o; the MLP is never biased (``mlp_bias`` is refused
as unknown). ``clip_qkv`` (OLMo-1.7-7B's and OLMo-7B-0424's 8) clamps the query, key and value
projections to [-c, c] (the attention's ``clip``). Defaults are OlmoConfig's (OLMo-7B's shape).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Rule, Source, number, register
from tfspec.interop.hf.llama import Llama


@register
class Olmo(Llama):
    model_type = "olmo"
    title = "OLMo"
    architectures = {"OlmoForCausalLM": "model.", "OlmoModel": ""}
    export_architecture = "OlmoForCausalLM"
    mapped = tuple(f for f in Llama.mapped if f not in ("mlp_bias", "rms_norm_eps")) + ("clip_qkv",)
    defaults = {"vocab_size": 50304, "pad_token_id": 1, "bos_token_id": None, "eos_token_id": 50279}
    """OlmoConfig's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        return super().spec_data(replace(source, config=self.defaults | source.config)) | {
            "norm_type": "layer", "norm_bias": False, "norm_gain": False, "norm_eps": 1e-5}

    def _attention(self, c: dict, where: str):
        if c.get("clip_qkv") is None:
            return "causal_self_attention"
        clip = number(c, "clip_qkv", where, float)
        if clip <= 0:
            raise TfspecError(f"{where}: clip_qkv must be positive (the clamp's bound), got {clip}")
        return {"kind": "causal_self_attention", "clip": clip}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Llama's rules without the norms' gains: OLMo's norms have none."""
        return [r for r in super().rules(spec, architecture) if not r.ir.endswith("norm.weight")]

    def config(self, spec) -> dict:
        config = super().config(spec)
        del config["rms_norm_eps"]
        return config | {"clip_qkv": spec.plan("decoder")[0].attention.clip}

    def _config_biases(self, spec) -> dict:
        return {"attention_bias": spec.has_bias("q")}
