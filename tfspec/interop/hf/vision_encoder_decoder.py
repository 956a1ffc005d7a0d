"""TrOCR (``model_type: vision-encoder-decoder``): transformers' VisionEncoderDecoderModel with a ViT
or DeiT encoder and a TrOCRForCausalLM decoder (microsoft/trocr-small-printed, trocr-base-handwritten;
Li et al. 2021, §2.1) as a tfspec spec.

The configuration nests the encoder's (``encoder``: a ``vit.py`` or ``deit.py`` configuration,
read and checked by that family, its base model with the pooler AutoModel gives it) and the
decoder's (``decoder``, TrOCRConfig). The spec is the decoder, the encoder a spec of its own
(``tfspec.spec.image_encoder``): the two share no width, norm placement or epsilon. The decoder is
fairseq's: post-norm layers with LayerNorms of epsilon 1e-5, token embeddings scaled by
sqrt(d_model) under ``scale_embedding``, learned positions read from row 2 on
(``use_learned_position_embeddings``; BART's offset) or sinusoids as [all sines | all cosines] at
frequencies 10000^(-i / (d/2 - 1)) read from row pad_token_id + 1 on (M2M-100's, not stored), a
LayerNorm on embeddings + positions (``layernorm_embedding``), cross-attention into the encoder's
last hidden states, projected to d_model where the widths differ (``enc_to_dec_proj``), and the
output projection tied to the embedding unless the decoder's tie_word_embeddings is false.
Decoding starts from decoder_start_token_id (the top level's, else the decoder's), as ``generate``
reads it. Defaults are TrOCRConfig's.
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import (FAMILIES, Family, Rule, Source, _show, activation, check_config, end_ids, flag,
                                      norm_rules, number, register)
from tfspec.interop.hf.marian import _attention, _ffn
from tfspec.interop.hf.vit import ViT

ENCODERS = ("vit", "deit")
"""The encoders' model types: their families (``vit.py``, ``deit.py``) read and name them; a vision
spec with a distillation token is DeiT's."""
PARTS = {"encoder": {"model_type": "vit"}, "decoder": {"model_type": "bert"}}
"""What VisionEncoderDecoderConfig takes for a part left out: ViTConfig's and BertConfig's defaults."""
IDS = ("decoder_start_token_id", "pad_token_id", "eos_token_id")
"""The ids the top level may set over the decoder's (``generate`` reads the top level's first)."""
POSITION_OFFSET = 2
"""TrOCRLearnedPositionalEmbedding.offset: the table's first two rows are never read."""


class TrOCRDecoder(Family):
    """The ``decoder`` configuration's fields (TrOCRConfig), checked as a family's are."""

    model_type = "trocr"
    title = "TrOCR's decoder"
    mapped = ("vocab_size", "d_model", "decoder_layers", "decoder_attention_heads", "decoder_ffn_dim",
              "activation_function", "max_position_embeddings", "dropout", "attention_dropout", "activation_dropout",
              "scale_embedding", "use_learned_position_embeddings", "layernorm_embedding", "pad_token_id",
              "bos_token_id", "eos_token_id", "decoder_start_token_id", "tie_word_embeddings",
              "cross_attention_hidden_size")
    required = {"is_decoder": (True,), "add_cross_attention": (True,), "is_encoder_decoder": (False,)}
    ignored = {"decoder_layerdrop": "training only (drops whole layers)", "init_std": "initialisation of untrained weights"}
    defaults = {"vocab_size": 50265, "d_model": 1024, "decoder_layers": 12, "decoder_attention_heads": 16,
                "decoder_ffn_dim": 4096, "max_position_embeddings": 512, "pad_token_id": 1, "bos_token_id": 0,
                "eos_token_id": 2, "decoder_start_token_id": 2}

    def check(self, config: dict, where: str) -> dict[str, str]:
        return check_config(self, {k: v for k, v in config.items() if k != "cross_attention_hidden_size"}, where)


@register
class VisionEncoderDecoder(Family):
    model_type = "vision-encoder-decoder"
    family = "encoder-decoder"
    title = "TrOCR"
    architectures = {"VisionEncoderDecoderModel": ""}
    export_architecture = "VisionEncoderDecoderModel"
    mapped = ("encoder", "decoder", "decoder_start_token_id", "pad_token_id", "eos_token_id")
    required = {"is_encoder_decoder": (True,), "tie_word_embeddings": (False,)}
    ignored = {"decoder_start_token_id": "read as the token decoding starts from",
               **dict.fromkeys(("vocab_size", "bos_token_id"), "the decoder's own is read (decoder.*)")}

    def _parts(self, config: dict, where: str) -> tuple[dict, dict, ViT]:
        """The encoder's and decoder's configurations, and the family reading the encoder's."""
        parts = []
        for key in ("encoder", "decoder"):
            value = config.get(key, PARTS[key])
            if not isinstance(value, dict):
                raise TfspecError(f"{where}: {key} must be an object (the {key}'s configuration), got {_show(value)}")
            parts.append(value)
        encoder, decoder = parts
        if decoder.get("model_type") != "trocr":
            raise TfspecError(f"{where}: decoder.model_type: {_show(decoder.get('model_type'))} is not supported; "
                              "tfspec imports a VisionEncoderDecoderModel whose decoder is TrOCR's (trocr)")
        if encoder.get("model_type") not in ENCODERS:
            raise TfspecError(f"{where}: encoder.model_type: {_show(encoder.get('model_type'))} is not supported; "
                              f"tfspec imports an image encoder of {' or '.join(ENCODERS)}")
        return encoder, TrOCRDecoder.defaults | decoder, FAMILIES[encoder["model_type"]]()

    def check(self, config: dict, where: str) -> dict[str, str]:
        """The top level's fields, then the encoder's (its family's lists) and the decoder's."""
        encoder, decoder, vision = self._parts(config, where)
        ignored = check_config(self, config, where)
        ignored |= {f"encoder.{k}": why for k, why in vision.check(encoder, f"{where} (encoder)").items()}
        ignored |= {f"decoder.{k}": why for k, why in TrOCRDecoder().check(decoder, f"{where} (decoder)").items()}
        return ignored

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        encoder, decoder, vision = self._parts(c, where)
        names = None if source.names is None else frozenset(
            n.removeprefix("encoder.") for n in source.names if n.startswith("encoder."))
        seen = vision.spec_data(Source(encoder, f"{where} (encoder)", vision.export_architecture, names))
        d, where = decoder, f"{where} (decoder)"
        width = number(d, "d_model", where)
        cross = number(d, "cross_attention_hidden_size", where, nullable=True)
        if cross is not None and cross != width:
            raise TfspecError(f"{where}: cross_attention_hidden_size ({cross}) differs from d_model ({width}): "
                              "its cross-attention reads keys and values of the encoder's width, which tfspec does "
                              "not compute; tfspec imports it null (the encoder projected to d_model, enc_to_dec_proj)"
                              " or equal to d_model")
        return {"family": self.family, "vocab": self._vocab(c, source.where, d, where), "d_model": width,
                "heads": number(d, "decoder_attention_heads", where), "d_ff": number(d, "decoder_ffn_dim", where),
                "activation": activation(d, "activation_function", where, "gelu"),
                "dropout": number(d, "dropout", where, float, 0.1),
                "attention_dropout": number(d, "attention_dropout", where, float, 0.0),
                "activation_dropout": number(d, "activation_dropout", where, float, 0.0), "label_smoothing": 0.0,
                "positional": self._positional(d, where), "norm": "post", "norm_eps": 1e-5, "final_norm": False,
                "tie_embeddings": "output" if flag(d, "tie_word_embeddings", where, True) else "none",
                "embed_norm": flag(d, "layernorm_embedding", where, True),
                "embed_scale": flag(d, "scale_embedding", where),
                "image_encoder": {"vision": {"name": "encoder", **seen}},
                "decoder": {"layers": number(d, "decoder_layers", where),
                            "block": ["causal_self_attention", "cross_attention", "ffn"]}}

    def _vocab(self, top: dict, top_where: str, d: dict, where: str) -> dict:
        """The decoder's ids, the top level's where it sets them (``generate`` reads those first)."""
        own = {k: top[k] for k in IDS if top.get(k) is not None}
        for key in own:
            if key == "eos_token_id":
                end_ids(own, top_where, None)
            else:
                number(own, key, top_where)
        merged = d | own
        size = number(d, "vocab_size", where)
        ends = end_ids(merged, where, TrOCRDecoder.defaults["eos_token_id"])
        ids = {"pad_id": number(merged, "pad_token_id", where), "bos_id": number(merged, "decoder_start_token_id", where),
               **ends}
        unk = next(i for i in range(size) if i not in ids.values())
        return {"size": size, **ids, "unk_id": unk}

    def _positional(self, d: dict, where: str) -> dict:
        max_len = number(d, "max_position_embeddings", where)
        if flag(d, "use_learned_position_embeddings", where, True):
            return {"kind": "learned", "max_len": max_len, "offset": POSITION_OFFSET}
        pad = number(d, "pad_token_id", where)
        return {"kind": "sinusoidal", "layout": "halves", "spacing": "endpoint", "offset": pad + 1, "max_len": max_len}

    def structure(self, spec) -> str | None:
        if spec.image_encoder is None:
            return f"{self.title} reads an image: this spec has no image_encoder"
        return super().structure(spec)

    def rules(self, spec, architecture: str) -> list[Rule]:
        vision = spec.image_encoder.vision
        family = FAMILIES["deit" if vision.patches.distillation_token else "vit"]()
        rules = [replace(r, hf=tuple(f"encoder.{n}" for n in r.hf))
                 for r in family.rules(vision, family.export_architecture)]
        if vision.d_model != spec.d_model:
            rules += [Rule(f"encoder.project.{p}", (f"enc_to_dec_proj.{p}",)) for p in ("weight", "bias")]
        p = "decoder.model.decoder."
        rules.append(Rule("decoder.embed.weight", (p + "embed_tokens.weight",)))
        if spec.embed_norm:
            rules += norm_rules("decoder.embed_norm", p + "layernorm_embedding")
        if spec.positional.kind == "learned":
            rules.append(Rule("decoder.pos.weight", (p + "embed_positions.weight",)))
        for i in range(spec.decoder.num_layers):
            ours, theirs = f"decoder.layers.{i}.", f"{p}layers.{i}."
            rules += [*_attention(ours + "self_attn", theirs + "self_attn", "qkv"),
                      *norm_rules(ours + "self_attn_norm", theirs + "self_attn_layer_norm"),
                      *_attention(ours + "cross_attn", theirs + "encoder_attn", "q"),
                      *_attention(ours + "cross_attn", theirs + "encoder_attn", "kv"),
                      *norm_rules(ours + "cross_attn_norm", theirs + "encoder_attn_layer_norm"), *_ffn(ours, theirs)]
        if not spec.ties_output:
            rules.append(Rule("output.weight", ("decoder.output_projection.weight",)))
        return rules

    def dropped(self, architecture: str) -> dict[str, str]:
        return {"decoder.output_projection.weight": "the output projection, tied to the decoder's embedding"}

    def outputs(self, architecture: str) -> dict[str, str]:
        return {"logits": "logits"}
