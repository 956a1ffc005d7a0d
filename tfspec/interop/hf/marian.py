"""Marian (``model_type: marian``): transformers' MarianMTModel (the OPUS-MT translation
models, e.g. Helsinki-NLP/opus-mt-en-de) as a tfspec spec.

The paper's encoder-decoder, nearly as written: post-norm layers, embeddings scaled by
sqrt(d_model) (``scale_embedding``), sinusoidal positions, one embedding matrix shared by the
encoder, the decoder and the output projection. It differs in three places: the sinusoids are
laid out as [all sines | all cosines] (``positional.layout: halves``), the output has a bias
(``final_logits_bias``), and decoding starts from the padding token (``decoder_start_token_id``
is ``pad_token_id``: the spec's bos_id is its pad_id). Query, key and value are separate
matrices in the checkpoint, stacked into ``w_qkv`` (cross-attention: key and value into
``w_kv``). Defaults are MarianConfig's. BART (``bart.py``) reuses the layer table.
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import (ACTIVATION_NAMES, Family, Rule, Source, _show, activation, end_ids,
                                     norm_rules, number, register, repeated_layer)
from tfspec.interop.hf.layouts import Concat, Row

LEFTOVERS = ("normalize_before", "normalize_embedding", "add_final_layer_norm", "add_bias_logits",
             "static_position_embeddings", "classif_dropout", "extra_pos_embeddings")
"""Fields older Marian and BART configurations carry that transformers' classes never read."""


@register
class Marian(Family):
    model_type = "marian"
    family = "encoder-decoder"
    title = "Marian"
    architectures = {"MarianMTModel": "model."}
    export_architecture = "MarianMTModel"
    heads = ("lm_head.", "final_logits_bias")
    mapped = ("vocab_size", "decoder_vocab_size", "d_model", "encoder_layers", "decoder_layers", "num_hidden_layers",
              "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim",
              "activation_function", "dropout", "attention_dropout", "activation_dropout", "max_position_embeddings",
              "scale_embedding", "pad_token_id", "eos_token_id", "decoder_start_token_id", "bos_token_id")
    required = {"is_encoder_decoder": (True,), "is_decoder": (False,), "share_encoder_decoder_embeddings": (True,),
                "tie_word_embeddings": (True,)}
    ignored = {"encoder_layerdrop": "training only (drops whole layers while training)",
               "decoder_layerdrop": "training only (drops whole layers while training)",
               "init_std": "initialisation of untrained weights",
               **dict.fromkeys(LEFTOVERS, "left over from fairseq's BART options; transformers' Marian reads none of "
                                          "them (it is always post-norm with static sinusoids, no embedding or final "
                                          "norm)")}
    defaults = {"vocab_size": 58101, "pad_token_id": 58100, "decoder_start_token_id": 58100, "eos_token_id": 0}
    """The config class's defaults of the vocabulary fields (the rest are alike in Marian and BART;
    members that differ more add theirs)."""
    embed_norm = False
    """A LayerNorm on embeddings + positions (BART's layernorm_embedding)."""
    stored_sinusoids = True
    """Whether transformers' class holds its sinusoid tables as (frozen) parameters, which
    ``num_parameters()`` counts: Marian's and Pegasus's are embeddings, M2M-100's buffers."""
    norm = "post"
    """Where each layer's LayerNorms sit; pre-norm members (mBART, Pegasus) end each stack with
    one more (``encoder.layer_norm``, ``decoder.layer_norm``)."""

    def spec_data(self, source: Source) -> dict:
        source = replace(source, config=self.defaults | source.config)
        c, where = source.config, source.where
        d_ff = number(c, "encoder_ffn_dim", where, default=4096)
        decoder_ffn = number(c, "decoder_ffn_dim", where, default=4096)
        ffn = "ffn" if decoder_ffn == d_ff else {"kind": "ffn", "d_ff": decoder_ffn}
        return {"family": self.family, "vocab": self._vocab(source),
                "d_model": number(c, "d_model", where, default=1024), "heads": self._heads(c, where), "d_ff": d_ff,
                "activation": activation(c, "activation_function", where, "gelu"),
                "dropout": number(c, "dropout", where, float, 0.1),
                "attention_dropout": number(c, "attention_dropout", where, float, 0.0),
                "activation_dropout": number(c, "activation_dropout", where, float, 0.0), "label_smoothing": 0.0,
                "positional": self._positional(c, where), "norm": self.norm, "norm_eps": 1e-5,
                "final_norm": self.norm == "pre", "tie_embeddings": "all", "embed_norm": self.embed_norm,
                "embed_scale": self._flag(c, "scale_embedding", where), "output_bias": self._output_bias(source),
                "encoder": {"layers": self._layers(c, where), "block": ["self_attention", "ffn"]},
                "decoder": {"layers": number(c, "decoder_layers", where, default=12),
                            "block": ["causal_self_attention", "cross_attention", ffn]}}

    def _output_bias(self, source: Source) -> bool:
        """Whether the checkpoint has final_logits_bias (transformers takes zeros when it is
        absent); a configuration alone: whether the class has the LM head (a base-model prefix)."""
        if source.names is not None:
            return "final_logits_bias" in source.names
        return self.architectures[source.architecture] != ""

    def _positional(self, c: dict, where: str) -> dict:
        max_len = number(c, "max_position_embeddings", where, default=1024)
        return {"kind": "sinusoidal", "layout": "halves", "max_len": max_len}

    def _flag(self, c: dict, key: str, where: str) -> bool:
        value = c.get(key, False)
        if not isinstance(value, bool):
            raise TfspecError(f"{where}: {key} must be true or false, got {_show(value)}")
        return value

    def _heads(self, c: dict, where: str) -> int:
        heads = number(c, "encoder_attention_heads", where, default=16)
        if number(c, "decoder_attention_heads", where, default=16) != heads:
            raise TfspecError(f"{where}: decoder_attention_heads: {_show(c['decoder_attention_heads'])} is not "
                              f"supported; tfspec imports {self.title} with as many heads as the encoder ({heads})")
        return heads

    def _layers(self, c: dict, where: str) -> int:
        layers = number(c, "encoder_layers", where, default=12)
        if c.get("num_hidden_layers", layers) != layers:  # transformers' alias of encoder_layers
            raise TfspecError(f"{where}: num_hidden_layers ({_show(c['num_hidden_layers'])}) differs from "
                              f"encoder_layers ({layers}); transformers reads it as encoder_layers: make them equal")
        return layers

    def _vocab(self, source: Source) -> dict:
        """pad and eos from the config; bos is the token decoding starts from; unk the
        tokenizer's <unk> (only tokenizers read it), else the first id that is none of them."""
        c, where = source.config, source.where
        d = self.defaults
        size = number(c, "vocab_size", where, default=d["vocab_size"])
        if c.get("decoder_vocab_size") not in (None, size):
            raise TfspecError(f"{where}: decoder_vocab_size: {_show(c['decoder_vocab_size'])} is not supported; "
                              f"tfspec imports {self.title} with one vocabulary (vocab_size {size})")
        ends = end_ids(c, where, d["eos_token_id"])
        ids = {"pad_id": number(c, "pad_token_id", where, default=d["pad_token_id"]),
               "bos_id": self._start(c, where), "eos_id": ends["eos_id"]}
        unk = source.vocabulary.get("<unk>")
        if not isinstance(unk, int) or not 0 <= unk < size:
            unk = next(i for i in range(size) if i not in ids.values())
        return {"size": size, "shared": True, **ids, "unk_id": unk, **ends}

    def _start(self, c: dict, where: str) -> int:
        """The token decoding starts from: decoder_start_token_id, or where it is null (as
        MBartConfig leaves it) bos_token_id, as ``generate`` falls back (read either way)."""
        start = number(c, "decoder_start_token_id", where, default=self.defaults["decoder_start_token_id"],
                       nullable=True)
        bos = number(c, "bos_token_id", where, default=self.defaults.get("bos_token_id"), nullable=start is not None)
        return bos if start is None else start

    def count_differences(self, spec, architecture: str) -> list[tuple[int, str]]:
        """The encoder's and decoder's max_len x d_model sinusoid tables (stored there, computed
        here); final_logits_bias, a buffer there, the trained output bias here."""
        differences = []
        if self.stored_sinusoids and spec.positional.kind == "sinusoidal":
            differences.append((2 * spec.positional.max_len * spec.d_model,
                                "sinusoid tables it stores as parameters (tfspec computes them)"))
        if spec.output_bias:
            differences.append((-spec.vocab.tgt_size, "final_logits_bias it keeps as a buffer"))
        return differences

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("encoder.embed.weight", ("shared.weight",))]
        rules += layer_rules(spec)
        if spec.uses_final_norm:  # the pre-norm members' last LayerNorm of each stack
            for stack in ("encoder", "decoder"):
                rules += norm_rules(f"{stack}.norm", f"{stack}.layer_norm")
        if spec.output_bias:
            rules.append(Rule("output.bias", ("final_logits_bias",), Row()))
        return rules

    def dropped(self, architecture: str) -> dict[str, str]:
        return {"lm_head.weight": "the output projection, tied to the shared embedding",
                "encoder.embed_tokens.weight": "the encoder's embedding, tied to the shared one",
                "decoder.embed_tokens.weight": "the decoder's embedding, tied to the shared one",
                "encoder.embed_positions.weight": "the position table, computed from the config",
                "decoder.embed_positions.weight": "the position table, computed from the config"}

    def config(self, spec) -> dict:
        """The configuration ``spec_data`` reads back as ``spec`` (``misfit`` checks that it does)."""
        encoder, encoder_ffn = repeated_layer(spec, "encoder")
        decoder, decoder_ffn = repeated_layer(spec, "decoder")
        v = spec.vocab
        return {"architectures": [self.export_architecture], "model_type": self.model_type, "vocab_size": v.size,
                "d_model": spec.d_model, "encoder_layers": spec.encoder.num_layers,
                "decoder_layers": spec.decoder.num_layers, "encoder_attention_heads": encoder.heads,
                "decoder_attention_heads": decoder.heads, "encoder_ffn_dim": encoder_ffn.d_ff,
                "decoder_ffn_dim": decoder_ffn.d_ff, "activation_function": ACTIVATION_NAMES[encoder_ffn.activation],
                "dropout": spec.dropout, "attention_dropout": spec.attention_dropout,
                "activation_dropout": spec.activation_dropout,
                "max_position_embeddings": spec.positional.max_len, "scale_embedding": spec.embed_scale,
                "pad_token_id": v.pad_id, "eos_token_id": v.eos_token_id, "decoder_start_token_id": v.bos_id,
                "is_encoder_decoder": True, "tie_word_embeddings": True, **self.exported}

    exported = {"share_encoder_decoder_embeddings": True}
    """Fields only this family's configuration class has."""


def layer_rules(spec) -> list[Rule]:
    """The encoder, then the decoder layers of Marian and BART (fairseq's names, which the IR's
    parameter paths mirror): self-attention, in the decoder cross-attention, then the ffn."""
    rules = []
    for stack, layers in (("encoder", spec.encoder.num_layers), ("decoder", spec.decoder.num_layers)):
        for i in range(layers):
            p = f"{stack}.layers.{i}."
            rules += [*_attention(p + "self_attn", p + "self_attn", "qkv"),
                      *norm_rules(p + "self_attn_norm", p + "self_attn_layer_norm")]
            if stack == "decoder":
                rules += [*_attention(p + "cross_attn", p + "encoder_attn", "q"),
                          *_attention(p + "cross_attn", p + "encoder_attn", "kv"),
                          *norm_rules(p + "cross_attn_norm", p + "encoder_attn_layer_norm")]
            rules += _ffn(p, p)
    return rules


def _attention(ours: str, theirs: str, parts: str) -> list[Rule]:
    """Projections ``parts`` (q, k, v) stacked into ``w_<parts>``; with q, the output too."""
    stored = tuple(f"{theirs}.{p}_proj" for p in parts)
    rules = [Rule(f"{ours}.w_{parts}", tuple(f"{s}.weight" for s in stored), Concat()),
             Rule(f"{ours}.b_{parts}", tuple(f"{s}.bias" for s in stored), Concat())]
    if "q" in parts:
        rules += [Rule(f"{ours}.w_o", (f"{theirs}.out_proj.weight",)),
                  Rule(f"{ours}.b_o", (f"{theirs}.out_proj.bias",))]
    return rules


def _ffn(ours: str, theirs: str) -> list[Rule]:
    return [Rule(ours + "ffn.w_1", (theirs + "fc1.weight",)), Rule(ours + "ffn.b_1", (theirs + "fc1.bias",)),
            Rule(ours + "ffn.w_2", (theirs + "fc2.weight",)), Rule(ours + "ffn.b_2", (theirs + "fc2.bias",)),
            *norm_rules(ours + "ffn_norm", theirs + "final_layer_norm")]
