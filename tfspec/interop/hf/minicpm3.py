"""MiniCPM3 (``model_type: minicpm3``): transformers' MiniCPM3ForCausalLM and MiniCPM3Model as
tfspec specs (openbmb/MiniCPM3-4B's shape).

Llama (``llama.py``: pre-RMSNorm, SwiGLU, rotary positions) with DeepSeek-V2's multi-head latent
attention (``latent_attention``, fields named as the config's, ``deepseek_v2.py``) rotating
q_pe and k_pe rotate-half as Llama does (no permutation), every MLP dense, and three of
Granite's multipliers (``granite.py``): the token embeddings times ``scale_emb``
(``embed_multiplier``), each sub-layer's output times scale_depth / sqrt(num_hidden_layers)
before it joins the residual (``residual_scale``), the last hidden states times
dim_model_base / hidden_size before the tied output projection (``output_scale``; MiniCPM3Model
has none). ``v_head_dim`` is hidden_size / heads unless said. Refused by name: biases
(``attention_bias``, ``mlp_bias``) and rope types other than default (MiniCPM3-4B's longrope,
which tfspec's rotary does not compute). Defaults are MiniCPM3Config's.
"""

from __future__ import annotations

import math
from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.deepseek_v2 import MLA_FIELDS
from tfspec.interop.hf.family import Rule, Source, number, register
from tfspec.interop.hf.llama import Llama

SCALES = ("scale_emb", "scale_depth", "dim_model_base")
"""MiniCPM's multipliers of the embeddings, the residual branches and the logits."""


@register
class MiniCPM3(Llama):
    model_type = "minicpm3"
    title = "MiniCPM3"
    architectures = {"MiniCPM3ForCausalLM": "model.", "MiniCPM3Model": ""}
    export_architecture = "MiniCPM3ForCausalLM"
    export_rank = 1  # a spec whose multipliers are 1 is DeepSeek-V2's with dense layers
    mapped = tuple(f for f in Llama.mapped if f not in ("attention_bias", "mlp_bias", "head_dim")) + MLA_FIELDS + SCALES
    required = {"attention_bias": (False,), "mlp_bias": (False,)}
    ignored = Llama.ignored | dict.fromkeys(("head_dim", "qk_head_dim"), "set by MiniCPM3Config from "
                                            "qk_rope_head_dim and qk_nope_head_dim, whatever the file says")
    rope_types = ("default",)
    defaults = {"vocab_size": 73448, "hidden_size": 2560, "intermediate_size": 6400, "num_hidden_layers": 62,
                "num_attention_heads": 40, "num_key_value_heads": 40, "max_position_embeddings": 32768,
                "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "kv_lora_rank": 256, "q_lora_rank": 768,
                "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "scale_emb": 12, "scale_depth": 1.4,
                "dim_model_base": 256, "bos_token_id": 1, "eos_token_id": 2}
    """MiniCPM3Config's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        c, where = self._filled(source), source.where
        heads, layers = c["num_attention_heads"], c["num_hidden_layers"]
        if number(c, "num_key_value_heads", where) != heads:
            raise TfspecError(f"{where}: num_key_value_heads ({c['num_key_value_heads']}) must equal "
                              f"num_attention_heads ({heads}): latent attention decodes keys and values for every head")
        scale = {key: number(c, key, where, int if key == "dim_model_base" else float) for key in SCALES}
        for key, value in scale.items():
            if value <= 0:
                raise TfspecError(f"{where}: {key} must be positive, got {value}")
        attention = self._attention(c, where)
        causal = source.architecture.endswith("ForCausalLM")
        return super().spec_data(replace(source, config=c)) | {
            "kv_heads": heads, "d_v": attention["v_head_dim"],
            "d_k": attention["qk_nope_head_dim"] + attention["qk_rope_head_dim"],
            "embed_multiplier": scale["scale_emb"], "residual_scale": scale["scale_depth"] / math.sqrt(layers),
            "output_scale": scale["dim_model_base"] / c["hidden_size"] if causal else 1.0}

    def _filled(self, source: Source) -> dict:
        """The configuration with MiniCPM3Config's defaults, and what its ``__post_init__`` derives
        from null fields (v_head_dim: hidden / heads, scale_depth: sqrt(layers), which makes the
        residual scale 1, dim_model_base: hidden_size)."""
        c, where = self.defaults | source.config, source.where
        hidden, heads = number(c, "hidden_size", where), number(c, "num_attention_heads", where)
        layers = number(c, "num_hidden_layers", where)
        derived = {"v_head_dim": hidden // heads, "scale_depth": math.sqrt(layers), "dim_model_base": hidden}
        return c | {key: value for key, value in derived.items() if c.get(key) is None}

    def _attention(self, c: dict, where: str):
        layer = {"kind": "latent_attention", **{k: number(c, k, where) for k in MLA_FIELDS if k != "q_lora_rank"}}
        if c.get("q_lora_rank") is not None:
            layer["q_lora_rank"] = number(c, "q_lora_rank", where)
        return layer

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Llama's, the attention's replaced by latent attention's (stored as DeepSeek-V2's)."""
        rules = [r for r in super().rules(spec, architecture) if not r.ir.endswith((".w_qkv", ".w_o"))]
        for layer in spec.plan("decoder"):
            a, ours, theirs = layer.attention, f"{layer.names[0]}.", f"layers.{layer.index}.self_attn."
            q = ("q", "q_proj") if a.q_lora_rank is None else ("qb", "q_b_proj")
            rules += [Rule(f"{ours}{name}", (f"{theirs}{stored}",)) for name, stored in (
                (f"w_{q[0]}", f"{q[1]}.weight"), ("w_kva", "kv_a_proj_with_mqa.weight"),
                ("kv_norm", "kv_a_layernorm.weight"), ("w_kvb", "kv_b_proj.weight"), ("w_o", "o_proj.weight"))]
            if a.q_lora_rank is not None:
                rules += [Rule(f"{ours}w_qa", (f"{theirs}q_a_proj.weight",)),
                          Rule(f"{ours}q_norm", (f"{theirs}q_a_layernorm.weight",))]
        return rules

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if any(layer.attention is None or layer.attention.kind != "latent_attention" for layer in spec.plan("decoder")):
            return f"{self.title}'s attention layers are latent attention; this spec has others"
        return None

    def config(self, spec) -> dict:
        a = spec.plan("decoder")[0].attention
        config = {k: v for k, v in super().config(spec).items() if k in self.mapped + ("architectures", "model_type")}
        return config | {k: getattr(a, k) for k in MLA_FIELDS} | {
            "attention_bias": False, "mlp_bias": False, "scale_emb": spec.embed_multiplier,
            "scale_depth": spec.residual_scale * math.sqrt(spec.decoder.num_layers),
            "dim_model_base": round(spec.output_scale * spec.d_model)}  # an integer, or a spec MiniCPM3 misfits
