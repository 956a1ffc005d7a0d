"""Whisper (``model_type: whisper``): transformers' WhisperForConditionalGeneration and WhisperModel
(openai/whisper-tiny to large-v3) as tfspec specs (Radford et al. 2022, §2.2, Figure 1).

An encoder-decoder whose encoder reads a log-mel spectrogram (``tfspec.spec.audio``: two
convolutions with GELU, then a stored sinusoid table, ``encoder.embed_positions``), and whose
decoder reads tokens with learned positions (``decoder.embed_positions``, ``max_target_positions``
rows). Both stacks are pre-norm with a final LayerNorm (``layer_norm``); every attention
projection has a bias but the key's (``biases: {k: false}``); the output projection is the
decoder's embedding (``proj_out``, tied). Decoding starts from ``decoder_start_token_id``
(<|startoftranscript|>: the spec's bos_id); the language, task and timestamp tokens that follow it
and the suppressed tokens are generation settings (``tfspec.transcription`` reads them from
generation_config.json). Defaults are WhisperConfig's.
"""

from __future__ import annotations


from tfspec.errors import TfspecError
from tfspec.interop.hf.family import (ACTIVATION_NAMES, Family, Rule, Source, _show, activation, end_ids, flag,
                                     norm_rules, number, register, repeated_layer)
from tfspec.interop.hf.layouts import Concat
from tfspec.interop.hf.marian import _ffn

SPEC_AUGMENT = ("apply_spec_augment", "mask_time_prob", "mask_time_length", "mask_time_min_masks",
                "mask_feature_prob", "mask_feature_length", "mask_feature_min_masks")
"""SpecAugment's settings: masks drawn over the features in training only."""


@register
class Whisper(Family):
    model_type = "whisper"
    family = "encoder-decoder"
    title = "Whisper"
    architectures = {"WhisperForConditionalGeneration": "model.", "WhisperModel": ""}
    export_architecture = "WhisperForConditionalGeneration"
    heads = ("proj_out.",)
    mapped = ("vocab_size", "num_mel_bins", "d_model", "encoder_layers", "decoder_layers", "num_hidden_layers",
              "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim",
              "activation_function", "dropout", "attention_dropout", "activation_dropout", "scale_embedding",
              "max_source_positions", "max_target_positions", "pad_token_id", "bos_token_id", "eos_token_id",
              "decoder_start_token_id")
    required = {"is_encoder_decoder": (True,), "tie_word_embeddings": (True,)}
    ignored = {**dict.fromkeys(("encoder_layerdrop", "decoder_layerdrop"), "training only (drops whole layers)"),
               "init_std": "initialisation of untrained weights",
               **dict.fromkeys(SPEC_AUGMENT, "SpecAugment: masks over the features in training only"),
               **dict.fromkeys(("use_weighted_layer_sum", "classifier_proj_size"),
                               "read by WhisperForAudioClassification only, which tfspec does not import"),
               "median_filter_width": "smooths cross-attention weights for word timestamps: no logit changes",
               **dict.fromkeys(("forced_decoder_ids", "alignment_heads", "lang_to_id", "task_to_id",
                                "no_timestamps_token_id", "is_multilingual", "max_initial_timestamp_index",
                                "return_timestamps"),
                               "generation settings (the decoder prompt: tfspec.transcription reads them from "
                               "generation_config.json)")}
    defaults = {"vocab_size": 51865, "num_mel_bins": 80, "d_model": 384, "encoder_layers": 4, "decoder_layers": 4,
                "encoder_attention_heads": 6, "decoder_attention_heads": 6, "encoder_ffn_dim": 1536,
                "decoder_ffn_dim": 1536, "max_source_positions": 1500, "max_target_positions": 448,
                "pad_token_id": 50256, "bos_token_id": 50256, "eos_token_id": 50256, "decoder_start_token_id": 50257}

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        d = self.defaults
        heads = number(c, "encoder_attention_heads", where)
        if number(c, "decoder_attention_heads", where) != heads:
            raise TfspecError(f"{where}: decoder_attention_heads: {_show(c['decoder_attention_heads'])} is not "
                              f"supported; tfspec imports Whisper with as many heads as the encoder ({heads})")
        layers = number(c, "encoder_layers", where)
        if c.get("num_hidden_layers", layers) != layers:
            raise TfspecError(f"{where}: num_hidden_layers ({_show(c['num_hidden_layers'])}) differs from "
                              f"encoder_layers ({layers}); transformers reads it as encoder_layers: make them equal")
        d_ff, decoder_ffn = number(c, "encoder_ffn_dim", where), number(c, "decoder_ffn_dim", where)
        ffn = "ffn" if decoder_ffn == d_ff else {"kind": "ffn", "d_ff": decoder_ffn}
        size = number(c, "vocab_size", where)
        number(c, "bos_token_id", where)  # <|endoftext|> again: decoding starts from decoder_start_token_id
        ends = end_ids(c, where, d["eos_token_id"])
        vocab = {"size": size, "shared": True, "pad_id": number(c, "pad_token_id", where),
                 "bos_id": number(c, "decoder_start_token_id", where), "unk_id": ends["eos_id"], **ends}
        return {"family": self.family, "vocab": vocab, "d_model": number(c, "d_model", where), "heads": heads,
                "d_ff": d_ff, "activation": activation(c, "activation_function", where, "gelu"),
                "dropout": number(c, "dropout", where, float, 0.0),
                "attention_dropout": number(c, "attention_dropout", where, float, 0.0),
                "activation_dropout": number(c, "activation_dropout", where, float, 0.0), "label_smoothing": 0.0,
                "positional": {"kind": "learned", "max_len": number(c, "max_target_positions", where)},
                "norm": "pre", "norm_eps": 1e-5, "final_norm": True, "tie_embeddings": "output",
                "embed_scale": flag(c, "scale_embedding", where), "biases": {"k": False},
                "spectrogram": {"mels": number(c, "num_mel_bins", where),
                                "positions": number(c, "max_source_positions", where)},
                "encoder": {"layers": layers, "block": ["self_attention", "ffn"]},
                "decoder": {"layers": number(c, "decoder_layers", where),
                            "block": ["causal_self_attention", "cross_attention", ffn]}}

    def structure(self, spec) -> str | None:
        if spec.spectrogram is None:
            return "Whisper's encoder reads a spectrogram; this spec has no spectrogram"
        if spec.spectrogram.subsampler is not None:
            return "Whisper's encoder has a convolution stem; this spec's spectrogram has a subsampler (Speech2Text's)"
        return super().structure(spec)

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("encoder.conv_stem.w_1", ("encoder.conv1.weight",)),
                 Rule("encoder.conv_stem.b_1", ("encoder.conv1.bias",)),
                 Rule("encoder.conv_stem.w_2", ("encoder.conv2.weight",)),
                 Rule("encoder.conv_stem.b_2", ("encoder.conv2.bias",)),
                 Rule("encoder.pos.weight", ("encoder.embed_positions.weight",)),
                 Rule("decoder.embed.weight", ("decoder.embed_tokens.weight",)),
                 Rule("decoder.pos.weight", ("decoder.embed_positions.weight",))]
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
            rules += norm_rules(f"{stack}.norm", f"{stack}.layer_norm")
        return rules

    def dropped(self, architecture: str) -> dict[str, str]:
        return {"proj_out.weight": "the output projection, tied to the decoder's embedding"}

    def outputs(self, architecture: str) -> dict[str, str]:
        if architecture == "WhisperModel":
            return {"memory": "encoder_last_hidden_state"}
        return {"logits": "logits"}

    def config(self, spec) -> dict:
        """The configuration ``spec_data`` reads back as ``spec`` (``misfit`` checks that it does)."""
        encoder, encoder_ffn = repeated_layer(spec, "encoder")
        decoder, decoder_ffn = repeated_layer(spec, "decoder")
        v, audio = spec.vocab, spec.spectrogram
        return {"architectures": [self.export_architecture], "model_type": self.model_type, "vocab_size": v.size,
                "num_mel_bins": audio.mels, "d_model": spec.d_model, "encoder_layers": spec.encoder.num_layers,
                "decoder_layers": spec.decoder.num_layers, "encoder_attention_heads": encoder.heads,
                "decoder_attention_heads": decoder.heads, "encoder_ffn_dim": encoder_ffn.d_ff,
                "decoder_ffn_dim": decoder_ffn.d_ff, "activation_function": ACTIVATION_NAMES[encoder_ffn.activation],
                "dropout": spec.dropout, "attention_dropout": spec.attention_dropout,
                "activation_dropout": spec.activation_dropout, "scale_embedding": spec.embed_scale,
                "max_source_positions": audio.positions, "max_target_positions": spec.positional.max_len,
                "pad_token_id": v.pad_id, "bos_token_id": v.eos_id, "eos_token_id": v.eos_token_id,
                "decoder_start_token_id": v.bos_id, "is_encoder_decoder": True, "tie_word_embeddings": True}


def _attention(ours: str, theirs: str, parts: str) -> list[Rule]:
    """Projections ``parts`` stacked into ``w_<parts>``; biases of q and v apart (k has none:
    ``b_q``, ``b_v``); with q, the output projection too."""
    stored = tuple(f"{theirs}.{p}_proj" for p in parts)
    rules = [Rule(f"{ours}.w_{parts}", tuple(f"{s}.weight" for s in stored), Concat())]
    rules += [Rule(f"{ours}.b_{p}", (f"{theirs}.{p}_proj.bias",)) for p in parts if p != "k"]
    if "q" in parts:
        rules += [Rule(f"{ours}.w_o", (f"{theirs}.out_proj.weight",)),
                  Rule(f"{ours}.b_o", (f"{theirs}.out_proj.bias",))]
    return rules
