"""Cohere (``model_type: cohere``): transformers' CohereForCausalLM and CohereModel as tfspec specs
(CohereForAI/c4ai-command-r-v01, aya-23-8B, aya-23-35B).

Llama (``llama.py``: SwiGLU, grouped-query attention, rotary positions) with these differences:
attention and MLP read one norm of the layer's input and are added to it in parallel
(``residual: parallel_shared_norm``); the norms are LayerNorms with a gain and no shift
(``norm_bias: false``, ``layer_norm_eps``); the logits are multiplied by ``logit_scale``
(``output_scale``, on the last hidden states: the output projection has no bias; CohereModel,
without one, ties a plain one to the embedding), tied to the embedding unless said; and rotary
positions rotate interleaved pairs (x_0, x_1), (x_2, x_3), ... (``InterleavedRotary``).
``attention_bias`` biases q, k, v and o; the MLP is never biased (``mlp_bias`` is refused as
unknown). ``use_qk_norm`` (c4ai-command-r-plus) puts a LayerNorm without shift on each head's
queries and keys, its gains (heads, head_dim) differing per head (``qk_norm: per_head``; their
features permuted as the rotary rows, ``InterleavedGains``). Defaults are CohereConfig's
(command-r-v01's shape).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tfspec.interop.hf.family import Rule, Source, flag, number, register
from tfspec.interop.hf.layouts import Concat
from tfspec.interop.hf.llama import Llama
from tfspec.positions import rotary


@dataclass(frozen=True)
class InterleavedRotary(Concat):
    """Stacked query, key (and value) rows (``Concat``), each head ``width`` rows, whose
    first ``rotated`` rows (the queries' and keys') rotate the first ``rotary`` features of each
    head in interleaved pairs (x_0, x_1), (x_2, x_3), ... (GPT-J's rotate_every_two, Cohere).
    tfspec's rotary rotates halves (x_i, x_{i+r/2}); scores are sums over features, unchanged
    when queries and keys permute their features alike, so the IR holds each head's rotary rows
    even ones first, then odd ones, and export puts them back."""

    width: int = 0
    rotary: int = 0
    rotated: int = 0

    def _order(self, rows: int) -> np.ndarray:
        heads = np.arange(self.rotated).reshape(-1, self.width)
        pairs = heads[:, :self.rotary]
        order = np.concatenate([pairs[:, 0::2], pairs[:, 1::2], heads[:, self.rotary:]], 1).ravel()
        return np.concatenate([order, np.arange(self.rotated, rows)])

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        value = super().to_ir(parts)
        return value[self._order(len(value))]

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return super().to_hf(value[np.argsort(self._order(len(value)))], count)


@dataclass(frozen=True)
class InterleavedGains(InterleavedRotary):
    """Per-head query or key norm gains (heads, d_k) (Command R+'s ``q_norm``): each head's
    features in the order ``InterleavedRotary`` gives a head's rows, since the norm's output is
    what rotates."""

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        return parts[0][:, self._order(self.width)]

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return [value[:, np.argsort(self._order(self.width))]]


def interleaved(rules: list[Rule], spec) -> list[Rule]:
    """``rules`` with each layer's ``w_qkv`` and ``b_qkv`` read as ``InterleavedRotary``, its
    per-head norm gains as ``InterleavedGains``."""
    plans = {layer.names[0]: layer.attention for layer in spec.plan("decoder")}
    out = []
    for rule in rules:
        name, _, kind = rule.ir.rpartition(".")
        if kind in ("w_qkv", "b_qkv"):
            a = plans[name]
            layout = InterleavedRotary(rule.layout.rows, width=a.d_k, rotary=rotary.rotated(a.positions, a.d_k),
                                       rotated=(a.heads + a.kv_heads) * a.d_k)
            rule = replace(rule, layout=layout)
        elif kind in ("q_norm", "k_norm") and plans[name].qk_norm == "per_head":
            a = plans[name]
            layout = InterleavedGains(width=a.d_k, rotary=rotary.rotated(a.positions, a.d_k), rotated=a.d_k)
            rule = replace(rule, layout=layout)
        out.append(rule)
    return out


@register
class Cohere(Llama):
    model_type = "cohere"
    title = "Cohere"
    architectures = {"CohereForCausalLM": "model.", "CohereModel": ""}
    export_architecture = "CohereForCausalLM"
    mapped = tuple(f for f in Llama.mapped if f not in ("mlp_bias", "rms_norm_eps")) + ("layer_norm_eps",
                                                                                        "logit_scale", "use_qk_norm")
    defaults = {"vocab_size": 256000, "hidden_size": 8192, "intermediate_size": 22528, "num_hidden_layers": 40,
                "num_attention_heads": 64, "max_position_embeddings": 8192, "pad_token_id": 0, "bos_token_id": 5,
                "eos_token_id": 255001, "tie_word_embeddings": True, "rope_theta": 500000.0}
    """CohereConfig's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        return super().spec_data(replace(source, config=c)) | {
            "norm_type": "layer", "norm_bias": False, "norm_eps": number(c, "layer_norm_eps", where, float, 1e-5),
            "residual": "parallel_shared_norm", "output_scale": self._output_scale(source, c)}

    def _attention(self, c: dict, where: str):
        if flag(c, "use_qk_norm", where):
            return {"kind": "causal_self_attention", "qk_norm": "per_head"}
        return "causal_self_attention"

    def _output_scale(self, source: Source, c: dict) -> float:
        """logit_scale for CohereForCausalLM; CohereModel's spec has the plain tied projection."""
        scale = number(c, "logit_scale", source.where, float, 0.0625)
        return scale if source.architecture.endswith("ForCausalLM") else 1.0

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Llama's rules, the one norm of each layer its ``input_layernorm``, rotary rows interleaved."""
        rules = [r for r in super().rules(spec, architecture) if not r.ir.endswith("ffn_norm.weight")]
        for layer in spec.plan("decoder"):
            if layer.attention.qk_norm == "per_head":
                rules += [Rule(f"{layer.names[0]}.{p}_norm", (f"layers.{layer.index}.self_attn.{p}_norm.weight",))
                          for p in "qk"]
        return interleaved(rules, spec)

    def config(self, spec) -> dict:
        shared = {k: v for k, v in super().config(spec).items() if k in self.mapped + ("architectures", "model_type")}
        return shared | {"layer_norm_eps": spec.norm_eps, "logit_scale": spec.output_scale,
                         "use_qk_norm": spec.plan("decoder")[0].attention.qk_norm == "per_head"}

    def _config_biases(self, spec) -> dict:
        return {"attention_bias": spec.has_bias("q")}
