"""Phi (``model_type: phi``): transformers' PhiForCausalLM and PhiModel as tfspec specs
(microsoft/phi-1, phi-1_5, phi-2).

StableLM (``stablelm.py``: LayerNorms, rotary positions on the first ``partial_rotary_factor``
of each head's features, here 0.5 unless said, grouped-query attention, untied output) with
these differences: attention and MLP read one LayerNorm of the layer's input and add to it in
parallel (``residual: parallel_shared_norm``); the MLP is one GELU layer (``fc1``, ``fc2``), not
gated; every projection is biased, the output projection too (``output_bias``; PhiModel has no
output projection, so its spec ties one to the embedding without a bias); ``qk_layernorm``
normalises queries and keys with a LayerNorm over each head's features, one gain shared by the
heads (``qk_norm: head``). ``resid_pdrop`` is tfspec's dropout. phi-1 and phi-1_5 write null
bos and eos ids: their tokenizer's <|endoftext|> (from vocab.json) is then bos and eos. Defaults
are PhiConfig's (phi-1_5's shape).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.interop.hf.family import Rule, Source, flag, norm_rules, number, register
from tfspec.interop.hf.layouts import Concat
from tfspec.interop.hf.stablelm import StableLm

PARTIAL_ROTARY = 0.5
"""PhiConfig's partial_rotary_factor when a configuration leaves it out."""


@register
class Phi(StableLm):
    model_type = "phi"
    title = "Phi"
    architectures = {"PhiForCausalLM": "model.", "PhiModel": ""}
    export_architecture = "PhiForCausalLM"
    mapped = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "hidden_act", "max_position_embeddings", "layer_norm_eps", "rope_parameters",
              "rope_theta", "rope_scaling", "partial_rotary_factor", "qk_layernorm", "tie_word_embeddings",
              "bos_token_id", "eos_token_id", "pad_token_id", "attention_dropout", "resid_pdrop")
    required = {}
    ignored = {"embd_pdrop": "training only; tfspec's one dropout (resid_pdrop) covers the embeddings too"}
    rope_types = ("default",)
    defaults = {"vocab_size": 51200, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
                "num_attention_heads": 32, "hidden_act": "gelu_new", "max_position_embeddings": 2048,
                "bos_token_id": 1, "eos_token_id": 2}
    """PhiConfig's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        ending = source.vocabulary.get("<|endoftext|>")
        c |= {key: ending for key in ("bos_token_id", "eos_token_id") if c[key] is None and ending is not None}
        if c.get("num_key_value_heads") is None:  # phi-1_5 writes null: one key/value head per query head
            c.pop("num_key_value_heads", None)
        return super().spec_data(replace(source, config=c)) | {
            "gated": False, "bias": True, "biases": dict.fromkeys("qkvo", True) | {"ffn": True},
            "residual": "parallel_shared_norm",
            "output_bias": source.architecture.endswith("ForCausalLM"),
            "dropout": number(c, "resid_pdrop", where, float, 0.0)}

    def _attention(self, c: dict, where: str):
        if flag(c, "qk_layernorm", where, False):
            return {"kind": "causal_self_attention", "qk_norm": "head"}
        return "causal_self_attention"

    def _rotary(self, c: dict, where: str) -> dict:
        return super()._rotary({"partial_rotary_factor": PARTIAL_ROTARY} | c, where)

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("decoder.embed.weight", ("embed_tokens.weight",)), *norm_rules("decoder.norm", "final_layernorm")]
        if architecture.endswith("ForCausalLM"):
            rules.append(Rule("output.bias", ("lm_head.bias",)))
            if spec.tie_embeddings == "none":
                rules.append(Rule("output.weight", ("lm_head.weight",)))
        for layer in spec.plan("decoder"):
            (attn, ffn), theirs, a = layer.names, f"layers.{layer.index}.", layer.attention
            rows, qkv = (a.heads * a.d_k, a.kv_heads * a.d_k, a.kv_heads * a.d_v), ("q", "k", "v")
            rules += [*norm_rules(f"{attn}_norm", f"{theirs}input_layernorm"),
                      *(Rule(f"{attn}.{kind[0]}_qkv", tuple(f"{theirs}self_attn.{p}_proj.{kind}" for p in qkv),
                             Concat(rows)) for kind in ("weight", "bias")),
                      *_linear(f"{attn}.", "o", f"{theirs}self_attn.dense"),
                      *_linear(f"{ffn}.", "1", f"{theirs}mlp.fc1"), *_linear(f"{ffn}.", "2", f"{theirs}mlp.fc2")]
            if a.qk_norm == "head":
                rules += [Rule(f"{attn}.{p}_norm{suffix}", (f"{theirs}self_attn.{p}_layernorm.{kind}",))
                          for p in "qk" for suffix, kind in (("", "weight"), ("_bias", "bias"))]
        return rules

    def dropped(self, architecture: str) -> dict[str, str]:
        if architecture.endswith("ForCausalLM"):
            return super().dropped(architecture)
        return super().dropped(architecture) | {"lm_head.bias": f"{architecture} has no output projection"}

    def config(self, spec) -> dict:
        """StableLM's fields this family shares, and its own."""
        shared = {k: v for k, v in super().config(spec).items() if k in self.mapped + ("architectures", "model_type")}
        attention = spec.plan("decoder")[0].attention
        return shared | {"qk_layernorm": attention.qk_norm == "head", "resid_pdrop": spec.dropout,
                         "embd_pdrop": spec.dropout}


def _linear(ours: str, suffix: str, theirs: str) -> list[Rule]:
    """An ``nn.Linear``'s weight and bias as IR ``w_<suffix>`` and ``b_<suffix>`` of ``ours``."""
    return [Rule(f"{ours}w_{suffix}", (f"{theirs}.weight",)), Rule(f"{ours}b_{suffix}", (f"{theirs}.bias",))]
