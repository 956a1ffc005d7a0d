"""Persimmon (``model_type: persimmon``): transformers' PersimmonForCausalLM and PersimmonModel as
tfspec specs (adept/persimmon-8b-base, persimmon-8b-chat).

GPT-NeoX (``gpt_neox.py``: biased LayerNorms, ``query_key_value`` stored head by head, rotary
positions rotate-half on the first ``partial_rotary_factor`` of each head's features, 0.5 unless
said, every projection biased, an ungated MLP ``dense_h_to_4h``/``dense_4h_to_h``) under Llama's
module names, with a sequential layer (a norm before attention, another before the MLP), squared
ReLU (``hidden_act: relu2``), and with ``qk_layernorm`` (true by default) a biased LayerNorm on
each head's queries and keys whose gain and shift the heads share (``qk_norm: head``). The
output projection has no bias and is untied unless said. Defaults are PersimmonConfig's
(persimmon-8b's shape).
"""

from __future__ import annotations

from tfspec.interop.hf.family import Rule, flag, register, repeated_layer
from tfspec.interop.hf.gpt_neox import GPTNeoX


@register
class Persimmon(GPTNeoX):
    model_type = "persimmon"
    title = "Persimmon"
    architectures = {"PersimmonForCausalLM": "model.", "PersimmonModel": ""}
    export_architecture = "PersimmonForCausalLM"
    export_rank = 1  # without qk_layernorm its specs may be GPT-NeoX's
    heads = ("lm_head.",)
    mapped = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "hidden_act", "max_position_embeddings", "layer_norm_eps", "rope_parameters", "rope_theta",
              "rope_scaling", "partial_rotary_factor", "qk_layernorm", "tie_word_embeddings", "bos_token_id",
              "eos_token_id", "pad_token_id", "attention_dropout", "hidden_dropout")
    ignored = {}
    defaults = {"vocab_size": 262144, "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 36,
                "num_attention_heads": 64, "hidden_act": "relu2", "max_position_embeddings": 16384,
                "partial_rotary_factor": 0.5, "bos_token_id": 1, "eos_token_id": 2}
    """PersimmonConfig's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""
    names = {"embed": "embed_tokens", "layers": "layers", "attention": "self_attn", "final": "final_layernorm",
             "output": "lm_head"}
    buffers = {"layers.*.self_attn.rotary_emb.inv_freq": "rotary frequencies, computed from the config"}

    def _residual(self, c: dict, where: str) -> str:
        return "sequential"

    def _attention(self, c: dict, where: str):
        if flag(c, "qk_layernorm", where, True):
            return {"kind": "causal_self_attention", "qk_norm": "head"}
        return "causal_self_attention"

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = super().rules(spec, architecture)
        for layer in spec.plan("decoder"):
            if layer.attention.qk_norm == "head":
                theirs = f"layers.{layer.index}.self_attn."
                rules += [Rule(f"{layer.names[0]}.{p}_norm{ours}", (f"{theirs}{p}_layernorm.{kind}",))
                          for p in "qk" for ours, kind in (("", "weight"), ("_bias", "bias"))]
        return rules

    def config(self, spec) -> dict:
        shared = {k: v for k, v in super().config(spec).items() if k in self.mapped + ("architectures", "model_type")}
        positions = repeated_layer(spec, "decoder")[0].positions
        return shared | {"partial_rotary_factor": positions.fraction, "rope_theta": positions.base,
                         "qk_layernorm": repeated_layer(spec, "decoder")[0].qk_norm == "head"}
