"""Falcon (``model_type: falcon``): transformers' FalconForCausalLM and FalconModel as tfspec
specs (tiiuae/falcon-7b, falcon-40b, falcon-11B).

GPT-NeoX (``gpt_neox.py``: LayerNorms, a GELU MLP, rotary positions, attention and MLP in
parallel) under its own field names, with these differences: rotary positions turn every
feature of a head; one ``bias`` switch for every projection (off in the published models);
the output is tied to the token embedding unless ``tie_word_embeddings`` is false; and three
layouts of the layer. ``new_decoder_architecture`` (falcon-40b, falcon-11B): ``num_kv_heads``
key/value heads, attention and MLP in parallel through their own LayerNorms (``ln_attn``,
``ln_mlp``; ``residual: parallel``), or through one when ``num_ln_in_parallel_attn`` is 1
(falcon-11B); ``query_key_value`` holds each group's h/g queries, then its key and value
(``layouts.PerGroup``). Else ``parallel_attn`` (falcon-7b): one LayerNorm shared by attention and
MLP (``residual: parallel_shared_norm``), or without it the sequential pre-norm layer; keys
and values are one head when ``multi_query`` (falcon-7b), else one a query head.

Refused by name: ``alibi`` (falcon-rw-1b, falcon-rw-7b), whose slopes transformers rounds to
bfloat16 and divides by sqrt(head_dim), which ALiBi as tfspec computes it does not; and the
combinations transformers' layer cannot run (``new_decoder_architecture`` without
``parallel_attn``, two norms without ``new_decoder_architecture``). Defaults are FalconConfig's
(falcon-7b's shape).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import (ACTIVATION_NAMES, Rule, Source, _show, activation, flag, number, register,
                                      repeated_layer)
from tfspec.interop.hf.gpt_neox import GPTNeoX
from tfspec.interop.hf.layouts import PerGroup

NORMS = {"sequential": ("input_layernorm", "post_attention_layernorm"), "parallel_shared_norm": ("input_layernorm",),
         "parallel": ("ln_attn", "ln_mlp")}
"""A layer's residual layout -> its LayerNorms' names, attention's first."""


@register
class Falcon(GPTNeoX):
    model_type = "falcon"
    title = "Falcon"
    architectures = {"FalconForCausalLM": "transformer.", "FalconModel": ""}
    export_architecture = "FalconForCausalLM"
    mapped = ("vocab_size", "hidden_size", "ffn_hidden_size", "num_hidden_layers", "num_attention_heads",
              "num_kv_heads", "activation", "max_position_embeddings", "layer_norm_epsilon", "rope_parameters",
              "rope_theta", "rope_scaling", "bias", "new_decoder_architecture", "multi_query", "parallel_attn",
              "num_ln_in_parallel_attn", "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id",
              "hidden_dropout")
    required = {"alibi": (False,)}
    ignored = {"attention_dropout": "training only, and without alibi transformers' Falcon drops no attention weights",
               "apply_residual_connection_post_layernorm": "left over from the RefinedWeb remote code (false in "
                                                           "falcon-7b's config); transformers' Falcon never reads it",
               "auto_map": "names the remote code of TII's repositories (trust_remote_code); transformers' own "
                           "Falcon classes read the same checkpoints"}
    partial_rotary = False
    defaults = {"vocab_size": 65024, "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
                "max_position_embeddings": 2048, "bos_token_id": 11, "eos_token_id": 11, "tie_word_embeddings": True}
    """FalconConfig's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""
    heads = ("lm_head.",)
    names = {"embed": "word_embeddings", "layers": "h", "attention": "self_attention", "final": "ln_f",
             "output": "lm_head"}
    buffers = {}

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        d_model, bias = number(c, "hidden_size", where), flag(c, "bias", where, False)
        d_ff = 4 * d_model if c.get("ffn_hidden_size") is None else number(c, "ffn_hidden_size", where)
        return super().spec_data(replace(source, config=c)) | {
            "kv_heads": self._kv_heads(c, where), "d_ff": d_ff, "bias": bias, "attention_dropout": 0.0,
            "activation": activation(c, "activation", where, "gelu"),
            "norm_eps": number(c, "layer_norm_epsilon", where, float, 1e-5)}

    def _projection_biases(self, c: dict, where: str) -> dict:
        return dict.fromkeys(("q", "k", "v", "o", "ffn"), flag(c, "bias", where, False))

    def _kv_heads(self, c: dict, where: str) -> int:
        heads = number(c, "num_attention_heads", where)
        kv = heads if c.get("num_kv_heads") is None else number(c, "num_kv_heads", where)
        if flag(c, "new_decoder_architecture", where, False):
            return kv
        if flag(c, "multi_query", where, True):
            return 1  # transformers reads num_kv_heads only with the new architecture or without multi_query
        if kv != heads:
            raise TfspecError(f"{where}: num_kv_heads: {kv} is not supported; without new_decoder_architecture or "
                              f"multi_query transformers' Falcon has one key/value head a query head ({heads})")
        return heads

    def _residual(self, c: dict, where: str) -> str:
        new = flag(c, "new_decoder_architecture", where, False)
        if not flag(c, "parallel_attn", where, True):
            if new:
                raise TfspecError(f"{where}: parallel_attn: false is not supported with new_decoder_architecture "
                                  "true: transformers' Falcon layer cannot run it")
            return "sequential"
        norms = c.get("num_ln_in_parallel_attn")
        norms = (2 if new else 1) if norms is None else number(c, "num_ln_in_parallel_attn", where)
        if norms not in ((1, 2) if new else (1,)):
            raise TfspecError(f"{where}: num_ln_in_parallel_attn: {_show(norms)} is not supported; Falcon's parallel "
                              f"layer reads 1 (one LayerNorm){' or 2 (one per sub-layer)' if new else ''}"
                              f"{'' if new else ' without new_decoder_architecture'}")
        return "parallel" if norms == 2 else "parallel_shared_norm"

    def _rotary(self, c: dict, where: str) -> dict:
        return super()._rotary({"partial_rotary_factor": 1.0} | c, where)  # every feature, unless rope says less

    def _norms(self, spec, attn: str, ffn: str) -> list[tuple[str, str]]:
        return list(zip((f"{attn}_norm", f"{ffn}_norm"), NORMS[spec.residual]))

    def _qkv(self, ours: str, theirs: str, attention) -> Rule:
        return Rule(ours, (theirs,), PerGroup(attention.heads, attention.kv_heads))

    def config(self, spec) -> dict:
        """The fields GPT-NeoX's configuration shares with Falcon's, and Falcon's own: the new
        architecture for parallel layers (any number of key/value heads, one or two norms),
        the old one for sequential layers (one key/value head, or one a query head)."""
        shared = {k: v for k, v in super().config(spec).items() if k in self.mapped + ("architectures", "model_type")}
        parallel, (attention, ffn) = spec.residual != "sequential", repeated_layer(spec, "decoder")
        kv_heads = attention.kv_heads
        return shared | {"ffn_hidden_size": ffn.d_ff, "num_kv_heads": kv_heads, "new_decoder_architecture": parallel,
                         "multi_query": kv_heads == 1, "parallel_attn": parallel,
                         "num_ln_in_parallel_attn": 2 if spec.residual == "parallel" else 1,
                         "activation": ACTIVATION_NAMES.get(ffn.activation, ffn.activation),
                         "layer_norm_epsilon": spec.norm_eps, "alibi": False, "bias": spec.has_bias("q")}
