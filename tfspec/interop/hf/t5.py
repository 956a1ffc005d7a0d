"""T5 (``model_type: t5``): transformers' T5ForConditionalGeneration as a tfspec spec
(google-t5/t5-small .. t5-11b, and the v1.1 checkpoints; ``specs/zoo/t5-small.yaml``).

A pre-norm encoder-decoder with RMSNorm (``layer_norm_epsilon``), no biases, and no position
embeddings: each stack adds T5's bucketed relative attention bias to its self-attention
logits (``positional.kind: relative_bias``, one table per stack, held by its first layer).
Attention does not divide by sqrt(d_k) (``scale: 1``), embeddings are not scaled up, and the
feed-forward layers are ``DenseReluDense`` (``feed_forward_proj``: ``relu``, or v1.1's
``gated-gelu``, GeGLU with the tanh gelu). One ``shared`` embedding serves both stacks; the
original T5 also ties it to the output, whose input it then scales by d_model^-0.5 (v1.1
does neither: ``tie_embeddings: inputs``, ``output_scale: 1``). Decoding starts from the
padding token (``decoder_start_token_id`` 0). Defaults are T5Config's.

Which of the two: transformers 4 reads ``tie_word_embeddings`` (false in v1.1 files) for
both. transformers 5 reads the scaling from ``scale_decoder_outputs`` (or, absent,
``tie_word_embeddings``), always writes ``tie_word_embeddings: true``, and keeps an
``lm_head.weight`` the checkpoint holds untied: so does tfspec, when the output is not scaled.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import (ACTIVATIONS, Family, Rule, Source, _show, end_ids, flag, number,
                                      register, repeated_layer)
from tfspec.interop.hf.layouts import Concat

ATTENTION = 1.0
"""T5's attention scale: q·k unscaled, the 1 / sqrt(d_k) folded into the initialisation."""


@register
class T5(Family):
    model_type = "t5"
    family = "encoder-decoder"
    title = "T5"
    architectures = {"T5ForConditionalGeneration": ""}
    export_architecture = "T5ForConditionalGeneration"
    heads = ("lm_head.",)
    mapped = ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads",
              "relative_attention_num_buckets", "relative_attention_max_distance", "dropout_rate",
              "layer_norm_epsilon", "feed_forward_proj", "tie_word_embeddings", "scale_decoder_outputs",
              "n_positions", "pad_token_id", "eos_token_id", "decoder_start_token_id")
    required = {"is_encoder_decoder": (True,), "is_decoder": (False,)}
    ignored = {"initializer_factor": "initialisation of untrained weights",
               **dict.fromkeys(("dense_act_fn", "is_gated_act"), "derived from feed_forward_proj, which "
                                                                  "transformers reads again when it loads"),
               "bos_token_id": "decoding starts from decoder_start_token_id; bos_token_id only tells tokenizers"}

    defaults: ClassVar[dict] = {}
    """Values a configuration class of T5's kin (mT5) gives fields config.json leaves out, where
    they differ from T5Config's."""

    def spec_data(self, source: Source) -> dict:
        source = replace(source, config=self.defaults | source.config)
        c, where = source.config, source.where
        d_model, d_kv = number(c, "d_model", where, default=512), number(c, "d_kv", where, default=64)
        activation, gated = _feed_forward(c, where)
        dropout = number(c, "dropout_rate", where, float, 0.1)
        return {"family": self.family, "vocab": _vocab(source), "d_model": d_model,
                "heads": number(c, "num_heads", where, default=8), "d_k": d_kv, "d_v": d_kv,
                "d_ff": number(c, "d_ff", where, default=2048), "activation": activation, "gated": gated,
                "dropout": dropout, "attention_dropout": dropout, "activation_dropout": dropout,
                "label_smoothing": 0.0, "positional": _positional(c, where), "norm": "pre", "norm_type": "rms",
                "norm_eps": number(c, "layer_norm_epsilon", where, float, 1e-6), "final_norm": True, "bias": False,
                "embed_scale": False, **self._output(source, d_model), **_stacks(c, where)}

    def _output(self, source: Source, d_model: int) -> dict:
        """tie_embeddings and output_scale, read as the module docstring says."""
        c, where = source.config, source.where
        scaled = flag(c, "scale_decoder_outputs", where, flag(c, "tie_word_embeddings", where, True))
        untied = (not flag(c, "tie_word_embeddings", where, True)
                  or (not scaled and source.names is not None and "lm_head.weight" in source.names))
        return {"tie_embeddings": "inputs" if untied else "all", "output_scale": d_model ** -0.5 if scaled else 1.0}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("encoder.embed.weight", ("shared.weight",))]
        if not spec.ties_output:
            rules.append(Rule("output.weight", ("lm_head.weight",)))
        for stack in ("encoder", "decoder"):
            rules.append(Rule(f"{stack}.norm.weight", (f"{stack}.final_layer_norm.weight",)))
            for layer in spec.plan(stack):
                rules += self.layer_rules(layer)
        return rules

    @staticmethod
    def layer_rules(layer) -> list[Rule]:
        """One layer's tensor rules (Switch Transformers' sparse layers differ)."""
        return _layer(layer)

    def dropped(self, architecture: str) -> dict[str, str]:
        return {"encoder.embed_tokens.weight": "the encoder's embedding, tied to the shared one",
                "decoder.embed_tokens.weight": "the decoder's embedding, tied to the shared one",
                "lm_head.weight": "the output projection, tied to the shared embedding",
                "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight":
                    "a cross-attention bias table some checkpoints carry and transformers never reads"}

    def config(self, spec) -> dict:
        v, pos = spec.vocab, spec.positional
        attention, ffn = repeated_layer(spec, "encoder")  # one set of sizes for both stacks (``misfit`` checks)
        projection = "gated-gelu" if ffn.gated and ffn.activation == "gelu_tanh" else (
            ("gated-" if ffn.gated else "") + next((k for k, a in ACTIVATIONS.items() if a == ffn.activation)))
        return {"architectures": [self.export_architecture], "model_type": self.model_type, "vocab_size": v.size,
                "d_model": spec.d_model, "d_kv": attention.d_k, "d_ff": ffn.d_ff, "num_heads": attention.heads,
                "num_layers": spec.encoder.num_layers, "num_decoder_layers": spec.decoder.num_layers,
                "relative_attention_num_buckets": pos.buckets, "relative_attention_max_distance": pos.max_distance,
                "n_positions": pos.max_len, "dropout_rate": spec.dropout, "layer_norm_epsilon": spec.norm_eps,
                "feed_forward_proj": projection, "tie_word_embeddings": spec.ties_output,
                "scale_decoder_outputs": spec.output_scale != 1.0, "is_encoder_decoder": True,
                "pad_token_id": v.pad_id, "eos_token_id": v.eos_token_id, "decoder_start_token_id": v.bos_id}


def _positional(c: dict, where: str) -> dict:
    """T5's relative attention bias; n_positions (512) only bounds the inputs tfspec accepts."""
    return {"kind": "relative_bias", "buckets": number(c, "relative_attention_num_buckets", where, default=32),
            "max_distance": number(c, "relative_attention_max_distance", where, default=128),
            "max_len": number(c, "n_positions", where, default=512)}


def _stacks(c: dict, where: str) -> dict:
    """The encoder's and decoder's layers (num_decoder_layers: null or absent means num_layers)."""
    layers = number(c, "num_layers", where, default=6)
    decoder = layers if c.get("num_decoder_layers") is None else number(c, "num_decoder_layers", where)
    attention = {"scale": ATTENTION}
    return {"encoder": {"layers": layers, "block": [{"kind": "self_attention", **attention}, "ffn"]},
            "decoder": {"layers": decoder, "block": [{"kind": "causal_self_attention", **attention},
                                                     {"kind": "cross_attention", **attention}, "ffn"]}}


def _layer(layer) -> list[Rule]:
    """Layer i of a stack (its ``LayerPlan``): T5's ``block.i.layer.<n>`` sub-layers
    (self-attention, in the decoder cross-attention, then the feed-forward layer), each with its
    RMSNorm gain."""
    rules, ours, ffn = attention_rules(layer)
    # Gated (v1.1): wi_0 goes through the activation (tfspec's W1), wi_1 is the linear branch (W3).
    inner = (("w_1", "wi_0"), ("w_3", "wi_1")) if layer.ffn.gated else (("w_1", "wi"),)
    rules += [Rule(f"{ours}ffn.{w}", (f"{ffn}DenseReluDense.{name}.weight",)) for w, name in inner]
    return rules + [Rule(ours + "ffn.w_2", (ffn + "DenseReluDense.wo.weight",)),
                    Rule(ours + "ffn_norm.weight", (ffn + "layer_norm.weight",))]


def attention_rules(layer) -> tuple[list[Rule], str, str]:
    """The attention sub-layers' rules of ``_layer``, our layer's prefix and the checkpoint's
    prefix of its feed-forward sub-layer (Switch Transformers replaces that sub-layer only)."""
    stack, i = layer.stack, layer.index
    ours, theirs = f"{stack}.layers.{i}.", f"{stack}.block.{i}.layer."
    rules = _attention(ours + "self_attn", theirs + "0.SelfAttention", "qkv")
    rules.append(Rule(ours + "self_attn_norm.weight", (theirs + "0.layer_norm.weight",)))
    if i == 0:  # the stack's relative bias table: (buckets, heads), as tfspec stores it
        rules.append(Rule(ours + "self_attn.rel_bias", (theirs + "0.SelfAttention.relative_attention_bias.weight",)))
    ffn = theirs + "1."
    if stack == "decoder":
        rules += [*_attention(ours + "cross_attn", theirs + "1.EncDecAttention", "q"),
                  *_attention(ours + "cross_attn", theirs + "1.EncDecAttention", "kv"),
                  Rule(ours + "cross_attn_norm.weight", (theirs + "1.layer_norm.weight",))]
        ffn = theirs + "2."
    return rules, ours, ffn


def _attention(ours: str, theirs: str, parts: str) -> list[Rule]:
    """Projections ``parts`` (T5's q, k, v) stacked into ``w_<parts>``; with q, the output o too."""
    rules = [Rule(f"{ours}.w_{parts}", tuple(f"{theirs}.{p}.weight" for p in parts), Concat())]
    return rules + ([Rule(f"{ours}.w_o", (f"{theirs}.o.weight",))] if "q" in parts else [])


def _feed_forward(c: dict, where: str) -> tuple[str, bool]:
    """(activation, gated) of ``feed_forward_proj``: ``ACT`` or ``gated-ACT``, as T5Config
    parses it (``gated-gelu`` is the tanh gelu, ``gelu_new``, for backward compatibility)."""
    value = c.get("feed_forward_proj", "relu")
    parts = value.split("-") if isinstance(value, str) else []
    gated = len(parts) == 2 and parts[0] == "gated"
    name = "gelu_new" if value == "gated-gelu" else parts[-1] if len(parts) == 1 + gated else None
    if name not in ACTIVATIONS:
        raise TfspecError(f"{where}: feed_forward_proj: {_show(value)} is not supported; tfspec computes "
                          f"{', '.join(ACTIVATIONS)} and gated-<each of them>")
    return ACTIVATIONS[name], gated


def _vocab(source: Source) -> dict:
    """pad and eos from the config; bos is the token decoding starts from (the pad token);
    unk the tokenizer's <unk> (only tokenizers read it), else the first id that is none of them."""
    c, where = source.config, source.where
    size = number(c, "vocab_size", where, default=32128)
    pad = number(c, "pad_token_id", where, default=0)
    ends = end_ids(c, where, 1)
    ids = {"pad_id": pad, "bos_id": number(c, "decoder_start_token_id", where, default=pad), "eos_id": ends["eos_id"]}
    unk = source.vocabulary.get("<unk>")
    if not isinstance(unk, int) or not 0 <= unk < size:
        unk = next(i for i in range(size) if i not in ids.values())
    return {"size": size, "shared": True, **ids, "unk_id": unk, **ends}
