"""Speech2Text (``model_type: speech_to_text``): transformers' Speech2TextForConditionalGeneration and
Speech2TextModel (facebook/s2t-small-librispeech-asr, s2t-medium-mustc-multilingual-st, ...) as
tfspec specs (Wang et al. 2020, "fairseq S2T", §3).

An encoder-decoder whose encoder reads Kaldi filterbank frames time first (``input_features``
(batch, frames, mels): ``tfspec.data.fbank``) through the convolutional subsampler
(``tfspec.spec.subsampler``: ``conv_kernel_sizes``, each of stride 2 with GLU, ``conv_channels``),
scaled by sqrt(d_model) (``scale_embedding``), and whose decoder reads tokens; both stacks add
fairseq's sinusoids ([all sines | all cosines] at 10000^(-i / (d/2 - 1)), M2M-100's), read from row
pad_token_id + 1 on (``positional.offset``: transformers numbers non-pad positions from
padding_idx + 1, and the encoder's padding mask is all zeros without an attention mask), buffers
that no parameter count holds. Both stacks are pre-norm with a final LayerNorm and ReLU
feed-forward layers; every projection has a bias; the output projection is the decoder's
embedding (``lm_head``, tied). Decoding starts from ``decoder_start_token_id`` (</s>, 2).
Defaults are Speech2TextConfig's.
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import (ACTIVATION_NAMES, Family, Rule, Source, _show, activation, end_ids, flag,
                                     norm_rules, number, register, repeated_layer)
from tfspec.interop.hf.marian import layer_rules


@register
class Speech2Text(Family):
    model_type = "speech_to_text"
    family = "encoder-decoder"
    title = "Speech2Text"
    architectures = {"Speech2TextForConditionalGeneration": "model.", "Speech2TextModel": ""}
    export_architecture = "Speech2TextForConditionalGeneration"
    heads = ("lm_head.",)
    mapped = ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "num_hidden_layers",
              "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim",
              "activation_function", "dropout", "attention_dropout", "activation_dropout", "scale_embedding",
              "max_source_positions", "max_target_positions", "pad_token_id", "bos_token_id", "eos_token_id",
              "decoder_start_token_id", "num_conv_layers", "conv_kernel_sizes", "conv_channels",
              "input_feat_per_channel")
    required = {"is_encoder_decoder": (True,), "tie_word_embeddings": (True,), "input_channels": (1,)}
    ignored = {**dict.fromkeys(("encoder_layerdrop", "decoder_layerdrop"), "training only (drops whole layers)"),
               "init_std": "initialisation of untrained weights"}
    defaults = {"vocab_size": 10000, "d_model": 256, "encoder_layers": 12, "decoder_layers": 6,
                "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 2048,
                "decoder_ffn_dim": 2048, "max_source_positions": 6000, "max_target_positions": 1024,
                "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2,
                "num_conv_layers": 2, "conv_kernel_sizes": [5, 5], "conv_channels": 1024,
                "input_feat_per_channel": 80, "scale_embedding": True, "dropout": 0.1}

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        heads = number(c, "encoder_attention_heads", where)
        if number(c, "decoder_attention_heads", where) != heads:
            raise TfspecError(f"{where}: decoder_attention_heads: {_show(c['decoder_attention_heads'])} is not "
                              f"supported; tfspec imports Speech2Text with as many heads as the encoder ({heads})")
        layers = number(c, "encoder_layers", where)
        if c.get("num_hidden_layers", layers) != layers:
            raise TfspecError(f"{where}: num_hidden_layers ({_show(c['num_hidden_layers'])}) differs from "
                              f"encoder_layers ({layers}); transformers reads it as encoder_layers: make them equal")
        d_ff, decoder_ffn = number(c, "encoder_ffn_dim", where), number(c, "decoder_ffn_dim", where)
        ffn = "ffn" if decoder_ffn == d_ff else {"kind": "ffn", "d_ff": decoder_ffn}
        pad = number(c, "pad_token_id", where)
        number(c, "bos_token_id", where)  # <s>: decoding starts from decoder_start_token_id
        return {"family": self.family, "vocab": self._vocab(source, c, pad), "d_model": number(c, "d_model", where),
                "heads": heads, "d_ff": d_ff, "activation": activation(c, "activation_function", where, "relu"),
                "dropout": number(c, "dropout", where, float, 0.1),
                "attention_dropout": number(c, "attention_dropout", where, float, 0.0),
                "activation_dropout": number(c, "activation_dropout", where, float, 0.0), "label_smoothing": 0.0,
                "positional": {"kind": "sinusoidal", "layout": "halves", "spacing": "endpoint", "offset": pad + 1,
                               "max_len": number(c, "max_target_positions", where)},
                "norm": "pre", "norm_eps": 1e-5, "final_norm": True, "tie_embeddings": "output",
                "embed_scale": flag(c, "scale_embedding", where),
                "spectrogram": {"mels": number(c, "input_feat_per_channel", where),
                                "positions": number(c, "max_source_positions", where),
                                "subsampler": {"kernel_sizes": _kernels(c, where),
                                               "channels": number(c, "conv_channels", where)}},
                "encoder": {"layers": layers, "block": ["self_attention", "ffn"]},
                "decoder": {"layers": number(c, "decoder_layers", where),
                            "block": ["causal_self_attention", "cross_attention", ffn]}}

    def _vocab(self, source: Source, c: dict, pad: int) -> dict:
        """pad and eos from the config, bos the token decoding starts from; unk the tokenizer's
        <unk> (3 in fairseq's dictionaries), else the first id that is none of them."""
        where = source.where
        size = number(c, "vocab_size", where)
        ends = end_ids(c, where, self.defaults["eos_token_id"])
        ids = {"pad_id": pad, "bos_id": number(c, "decoder_start_token_id", where), "eos_id": ends["eos_id"]}
        unk = source.vocabulary.get("<unk>")
        if not isinstance(unk, int) or not 0 <= unk < size:
            unk = next(i for i in range(size) if i not in ids.values())
        return {"size": size, "shared": True, **ids, "unk_id": unk, **ends}

    def structure(self, spec) -> str | None:
        if spec.spectrogram is None or spec.spectrogram.subsampler is None:
            return "Speech2Text's encoder reads filterbank frames through a subsampler; this spec has none"
        return super().structure(spec)

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = []
        for i in range(len(spec.spectrogram.subsampler.kernel_sizes)):
            rules += [Rule(f"encoder.subsampler.{role}_{i + 1}", (f"encoder.conv.conv_layers.{i}.{name}",))
                      for role, name in (("w", "weight"), ("b", "bias"))]
        rules += [Rule("decoder.embed.weight", ("decoder.embed_tokens.weight",)), *layer_rules(spec)]
        for stack in ("encoder", "decoder"):
            rules += norm_rules(f"{stack}.norm", f"{stack}.layer_norm")
        return rules

    def dropped(self, architecture: str) -> dict[str, str]:
        return {"lm_head.weight": "the output projection, tied to the decoder's embedding"}

    def outputs(self, architecture: str) -> dict[str, str]:
        if architecture == "Speech2TextModel":
            return {"memory": "encoder_last_hidden_state"}
        return {"logits": "logits"}

    def config(self, spec) -> dict:
        """The configuration ``spec_data`` reads back as ``spec`` (``misfit`` checks that it does)."""
        encoder, encoder_ffn = repeated_layer(spec, "encoder")
        decoder, decoder_ffn = repeated_layer(spec, "decoder")
        v, audio = spec.vocab, spec.spectrogram
        kernels = list(audio.subsampler.kernel_sizes)
        return {"architectures": [self.export_architecture], "model_type": self.model_type, "vocab_size": v.size,
                "d_model": spec.d_model, "encoder_layers": spec.encoder.num_layers,
                "decoder_layers": spec.decoder.num_layers, "encoder_attention_heads": encoder.heads,
                "decoder_attention_heads": decoder.heads, "encoder_ffn_dim": encoder_ffn.d_ff,
                "decoder_ffn_dim": decoder_ffn.d_ff, "activation_function": ACTIVATION_NAMES[encoder_ffn.activation],
                "dropout": spec.dropout, "attention_dropout": spec.attention_dropout,
                "activation_dropout": spec.activation_dropout, "scale_embedding": spec.embed_scale,
                "max_source_positions": audio.positions, "max_target_positions": spec.positional.max_len,
                "pad_token_id": v.pad_id, "bos_token_id": self.defaults["bos_token_id"],
                "eos_token_id": v.eos_token_id, "decoder_start_token_id": v.bos_id,
                "num_conv_layers": len(kernels), "conv_kernel_sizes": kernels,
                "conv_channels": audio.subsampler.channels, "input_feat_per_channel": audio.mels,
                "input_channels": 1, "is_encoder_decoder": True, "tie_word_embeddings": True}


def _kernels(c: dict, where: str) -> list[int]:
    """conv_kernel_sizes, as many as num_conv_layers (transformers refuses them otherwise too)."""
    kernels, count = c.get("conv_kernel_sizes"), number(c, "num_conv_layers", where)
    if not isinstance(kernels, list) or not kernels:
        raise TfspecError(f"{where}: conv_kernel_sizes must be a list of kernel sizes, got {_show(kernels)}")
    kernels = [number({"conv_kernel_sizes": k}, "conv_kernel_sizes", where) for k in kernels]
    if len(kernels) != count:
        raise TfspecError(f"{where}: conv_kernel_sizes ({_show(kernels)}) holds {len(kernels)} sizes but "
                          f"num_conv_layers is {count}: give one size per convolution")
    return kernels
