"""wav2vec 2.0 (``model_type: wav2vec2``): transformers' Wav2Vec2Model and Wav2Vec2ForCTC as tfspec
specs (Baevski et al. 2020; facebook/wav2vec2-base-960h, wav2vec2-large-960h-lv60-self).

An encoder over raw 16 kHz audio (``tfspec.spec.waveform``: the convolutional feature encoder,
the feature projection and the convolutional position embedding, its weight stored
weight-normalised as g and v), then Transformer layers: post-norm with a LayerNorm after the
position embedding (the spec's ``embed_norm``) where ``do_stable_layer_norm`` is false (base),
pre-norm with a final LayerNorm where it is true (large, "stable layer norm"). Every projection
has a bias; query, key and value are one ``w_qkv`` in tfspec. Wav2Vec2ForCTC adds the ``ctc``
head: dropout and ``lm_head`` over ``vocab_size`` labels, the blank at ``pad_token_id``, decoded
best-path (argmax, repeats merged, blanks dropped: ``tfspec.ctc.greedy``).
Wav2Vec2ForSequenceClassification adds the ``sequence_classification`` head: ``projector`` (to
classifier_proj_size), the mean over each row's real frames, ``classifier``; the layer-weighted sum
of every layer's states (``use_weighted_layer_sum``) is refused. HuBERT and WavLM subclass it
(``hubert.py``, ``wavlm.py``). Defaults are Wav2Vec2Config's.

SpecAugment (``apply_spec_augment``, ``mask_time_*``, ``mask_feature_*``) masks frames and
channels in training only, so it changes no output here; the learned vector it puts in masked
frames (``masked_spec_embed``, created when mask_time_prob or mask_feature_prob > 0) is held,
counted and exported (``waveform.mask_embedding``). The CTC alphabet is the tokenizer's
``vocab.json``: each label one character, the word delimiter ``|`` printed as a space; a label
of several characters (``<unk>``, ``<s>``) or a checkpoint without the file gets the private-use
character U+E000 + id, as no one character prints it.
"""

from __future__ import annotations

from typing import ClassVar

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Family, Rule, Source, _show, activation, flag, norm_rules, number, register
from tfspec.interop.hf.layouts import Concat
from tfspec.interop.hf.task_heads import TaskHeads

VOCAB = {"size": 4}
"""The base model reads no token ids; its spec's vocabulary holds only the four special ids."""
PLACEHOLDER = 0xE000
"""Labels no single character prints are printed as U+E000 + their id (Unicode's private use area)."""
DELIMITER = "|"
"""Wav2Vec2CTCTokenizer's word_delimiter_token, which it prints as a space."""
TRAINING = ("apply_spec_augment", "mask_time_length", "mask_time_min_masks", "mask_feature_length",
            "mask_feature_min_masks")
PRETRAINING = ("num_codevectors_per_group", "num_codevector_groups", "contrastive_logits_temperature",
               "num_negatives", "codevector_dim", "proj_codevector_dim", "diversity_loss_weight",
               "feat_quantizer_dropout")
OTHER_HEADS = ("tdnn_dim", "tdnn_kernel", "tdnn_dilation", "xvector_output_dim")
CLASSIFYING = ("use_weighted_layer_sum", "classifier_proj_size")
"""Read by the sequence classification head (and the frame classification and x-vector ones)."""


def ints(config: dict, key: str, where: str) -> list[int]:
    """``config[key]``, a non-empty list of positive integers (conv_dim, conv_kernel, conv_stride)."""
    value = config[key]
    if not isinstance(value, list) or not value or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                                                       for v in value):
        raise TfspecError(f"{where}: {key} must be a list of positive integers, got {_show(value)}")
    return value


@register
class Wav2Vec2(Family):
    model_type = "wav2vec2"
    family = "encoder-only"
    title = "wav2vec 2.0"
    architectures = {"Wav2Vec2Model": "", "Wav2Vec2ForCTC": "wav2vec2.",
                     "Wav2Vec2ForSequenceClassification": "wav2vec2."}
    export_architecture = "Wav2Vec2Model"
    ctc_architecture = "Wav2Vec2ForCTC"
    classification_architecture = "Wav2Vec2ForSequenceClassification"
    heads = ("lm_head.", "projector.", "classifier.")
    mapped = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "hidden_act", "hidden_dropout", "activation_dropout", "attention_dropout", "layer_norm_eps",
              "feat_extract_norm", "feat_extract_activation", "conv_dim", "conv_stride", "conv_kernel", "conv_bias",
              "num_conv_pos_embeddings", "num_conv_pos_embedding_groups", "do_stable_layer_norm", "mask_time_prob",
              "mask_feature_prob", "pad_token_id", "num_feat_extract_layers")
    required = {"add_adapter": (False,), "adapter_attn_dim": (None,)}
    ignored = {**dict.fromkeys(TRAINING, "SpecAugment: masks over frames and channels in training only"),
               **dict.fromkeys(("feat_proj_dropout", "final_dropout", "layerdrop"),
                               "training only (dropout, LayerDrop)"),
               **dict.fromkeys(("ctc_loss_reduction", "ctc_zero_infinity"), "the CTC loss: training only"),
               **dict.fromkeys(PRETRAINING, "Wav2Vec2ForPreTraining's quantizer and contrastive loss, which the "
                                            "model and its CTC head do not have"),
               **dict.fromkeys(OTHER_HEADS, "read by the x-vector head, which tfspec does not import"),
               **dict.fromkeys(CLASSIFYING, "read by the sequence classification, frame classification and "
                                            "x-vector heads, not by the model or its CTC head"),
               **dict.fromkeys(("adapter_kernel_size", "adapter_stride", "num_adapter_layers", "output_hidden_size"),
                               "the adapter's, which add_adapter false leaves out"),
               **dict.fromkeys(("bos_token_id", "eos_token_id"), "the tokenizer's; CTC reads only the blank (pad)")}
    defaults: ClassVar[dict] = {"vocab_size": 32, "hidden_size": 768, "num_hidden_layers": 12,
                                "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
                                "layer_norm_eps": 1e-5, "feat_extract_norm": "group", "feat_extract_activation": "gelu",
                                "conv_dim": [512] * 7, "conv_stride": [5, 2, 2, 2, 2, 2, 2],
                                "conv_kernel": [10, 3, 3, 3, 3, 2, 2], "num_conv_pos_embeddings": 128,
                                "num_conv_pos_embedding_groups": 16, "mask_time_prob": 0.05, "pad_token_id": 0,
                                "hidden_dropout": 0.1, "attention_dropout": 0.1, "activation_dropout": 0.1}

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        stable = flag(c, "do_stable_layer_norm", where)
        data = {"family": self.family, "vocab": VOCAB, "d_model": number(c, "hidden_size", where),
                "heads": number(c, "num_attention_heads", where), "d_ff": number(c, "intermediate_size", where),
                "activation": activation(c, "hidden_act", where, "gelu"),
                "dropout": number(c, "hidden_dropout", where, float, 0.0),
                "attention_dropout": number(c, "attention_dropout", where, float, 0.0),
                "activation_dropout": number(c, "activation_dropout", where, float, 0.0), "label_smoothing": 0.0,
                "positional": {"kind": "none"}, "norm": "pre" if stable else "post", "final_norm": stable,
                "embed_norm": not stable, "norm_eps": number(c, "layer_norm_eps", where, float),
                "waveform": self._waveform(c, where),
                "encoder": {"layers": number(c, "num_hidden_layers", where), "block": ["self_attention", "ffn"]}}
        ctc = self._ctc(c, where, source.vocabulary)  # checked for the base model too: its config holds them
        if source.architecture == self.classification_architecture:
            return data | self._classification(c, where)
        return data | ctc if source.architecture == self.ctc_architecture else data

    def _classification(self, c: dict, where: str) -> dict:
        """*ForSequenceClassification's head: projector, the mean over the real frames, classifier."""
        if flag(c, "use_weighted_layer_sum", where):
            raise TfspecError(f"{where}: use_weighted_layer_sum: true is not supported; tfspec classifies the last "
                              "layer's states, not a learned mix of every layer's (set it false)")
        head = {"kind": "sequence_classification", "pooling": "mean", "dropout": 0.0,
                "projection": number(c, "classifier_proj_size", where, default=256)}
        return {"head": head | TaskHeads._classes("sequence_classification", c, where)}

    def _waveform(self, c: dict, where: str) -> dict:
        norm = c.get("feat_extract_norm")
        if norm not in ("group", "layer"):
            raise TfspecError(f"{where}: feat_extract_norm: {_show(norm)} is not supported; transformers and tfspec "
                              "compute 'group' and 'layer'")
        dims = ints(c, "conv_dim", where)
        for key in ("conv_kernel", "conv_stride"):
            if len(ints(c, key, where)) != len(dims):
                raise TfspecError(f"{where}: {key} has {len(c[key])} entries, conv_dim {len(dims)}: give one per "
                                  "convolution")
        if number(c, "num_feat_extract_layers", where, default=len(dims)) != len(dims):
            raise TfspecError(f"{where}: num_feat_extract_layers ({c['num_feat_extract_layers']}) must be "
                              f"len(conv_dim) ({len(dims)}), as Wav2Vec2Config sets it")
        act = activation(c, "feat_extract_activation", where, "gelu")
        if act not in ("gelu", "gelu_tanh", "relu", "silu"):
            raise TfspecError(f"{where}: feat_extract_activation: {_show(c['feat_extract_activation'])} is not "
                              "supported; tfspec computes gelu, gelu_new, relu and silu there")
        probabilities = [number(c, key, where, float, 0.0) for key in ("mask_time_prob", "mask_feature_prob")]
        masked = max(probabilities) > 0
        return {"conv_dim": dims, "conv_kernel": c["conv_kernel"], "conv_stride": c["conv_stride"],
                "conv_bias": flag(c, "conv_bias", where), "feature_norm": norm, "activation": act,
                "position_kernel": number(c, "num_conv_pos_embeddings", where),
                "position_groups": number(c, "num_conv_pos_embedding_groups", where), "mask_embedding": masked,
                **self._projection(c, where)}

    def _projection(self, c: dict, where: str) -> dict:
        return {}

    def _ctc(self, c: dict, where: str, vocabulary: dict[str, int]) -> dict:
        """The head and the vocabulary of *ForCTC: vocab_size labels, the blank at pad_token_id."""
        size, blank = number(c, "vocab_size", where), number(c, "pad_token_id", where)
        if not 0 <= blank < size:
            raise TfspecError(f"{where}: pad_token_id ({blank}) must be a label id below vocab_size ({size}): CTC's "
                              "blank is the pad token")
        if size < 2:
            raise TfspecError(f"{where}: vocab_size ({size}) leaves no label besides the blank")
        texts = {i: token for token, i in vocabulary.items()}
        chars, seen = [], set()
        for i in range(size):
            if i == blank:
                continue
            text = " " if texts.get(i) == DELIMITER else texts.get(i, "")
            char = text if len(text) == 1 and text not in seen else chr(PLACEHOLDER + i)
            seen.add(char)
            chars.append(char)
        return {"vocab": {"size": size, "pad_id": blank, "bos_id": blank, "eos_id": blank, "unk_id": blank},
                "head": {"kind": "ctc", "alphabet": "".join(chars), "blank": blank}}

    def structure(self, spec) -> str | None:
        if spec.waveform is None:
            return f"{self.title} reads a waveform; this spec has none"
        if spec.head is not None and spec.head.kind not in ("ctc", "sequence_classification"):
            return f"{self.title} has no {spec.head.kind} head that tfspec imports"
        return super().structure(spec)

    def rules(self, spec, architecture: str) -> list[Rule]:
        w = spec.waveform
        rules = []
        for i in range(len(w.conv_dim)):
            theirs = f"feature_extractor.conv_layers.{i}."
            rules.append(Rule(f"encoder.feature_encoder.w_{i}", (theirs + "conv.weight",)))
            if w.conv_bias:
                rules.append(Rule(f"encoder.feature_encoder.b_{i}", (theirs + "conv.bias",)))
            if w.feature_norm == "layer" or i == 0:
                rules += [Rule(f"encoder.feature_encoder.norm_{p}_{i}", (f"{theirs}layer_norm.{t}",))
                          for p, t in (("w", "weight"), ("b", "bias"))]
        if w.projection_norm:
            rules += norm_rules("encoder.feature_norm", "feature_projection.layer_norm")
        pos = "encoder.pos_conv_embed.conv."
        rules += [Rule("encoder.feature_projection.weight", ("feature_projection.projection.weight",)),
                  Rule("encoder.feature_projection.bias", ("feature_projection.projection.bias",)),
                  Rule("encoder.pos.g", (pos + "parametrizations.weight.original0",)),
                  Rule("encoder.pos.v", (pos + "parametrizations.weight.original1",)),
                  Rule("encoder.pos.bias", (pos + "bias",)),
                  *norm_rules("encoder.embed_norm" if spec.embed_norm else "encoder.norm", "encoder.layer_norm")]
        if w.mask_embedding:
            rules.append(Rule("encoder.pos.mask_embedding", ("masked_spec_embed",)))
        for i in range(spec.encoder.num_layers):
            rules += _layer(f"encoder.layers.{i}.", f"encoder.layers.{i}.")
        if spec.head is not None and spec.head.kind == "ctc":
            rules += [Rule(f"output.{p}", (f"lm_head.{p}",)) for p in ("weight", "bias")]
        elif spec.head is not None:
            rules += [Rule(f"{ours}.{p}", (f"{theirs}.{p}",)) for ours, theirs in (("head.projector", "projector"),
                                                                                 ("classifier", "classifier"))
                      for p in ("weight", "bias")]
        return rules

    def rename(self, name: str) -> str:
        """Checkpoints saved before torch's parametrized weight norm (wav2vec2-base-960h) store g and v
        as ``weight_g`` and ``weight_v``."""
        return name.replace("conv.weight_g", "conv.parametrizations.weight.original0").replace(
            "conv.weight_v", "conv.parametrizations.weight.original1")

    def dropped(self, architecture: str) -> dict[str, str]:
        pretraining = {p: "Wav2Vec2ForPreTraining's quantizer and projections, which the model does not read"
                       for p in ("quantizer.*", "project_hid.*", "project_q.*")}
        if architecture == self.export_architecture:
            return pretraining | {"lm_head.*": f"a CTC head, not part of {architecture}"}
        return pretraining

    def architecture_for(self, spec) -> str:
        if spec.head is None:
            return self.export_architecture
        return self.ctc_architecture if spec.head.kind == "ctc" else self.classification_architecture

    def outputs(self, architecture: str) -> dict[str, str]:
        if architecture in (self.ctc_architecture, self.classification_architecture):
            return {"logits": "logits"}
        return {"memory": "last_hidden_state"}

    def config(self, spec) -> dict:
        raise TfspecError(f"export --format hf does not write {self.title} yet; export to ONNX (the default format)")


def _layer(ours: str, theirs: str) -> list[Rule]:
    """Attention (q, k, v stacked into w_qkv and b_qkv; out_proj), its norm, the feed-forward layer and its norm."""
    qkv = [f"{theirs}attention.{p}_proj" for p in "qkv"]
    return [Rule(ours + "self_attn.w_qkv", tuple(f"{p}.weight" for p in qkv), Concat()),
            Rule(ours + "self_attn.b_qkv", tuple(f"{p}.bias" for p in qkv), Concat()),
            Rule(ours + "self_attn.w_o", (f"{theirs}attention.out_proj.weight",)),
            Rule(ours + "self_attn.b_o", (f"{theirs}attention.out_proj.bias",)),
            *norm_rules(ours + "self_attn_norm", theirs + "layer_norm"),
            *norm_rules(ours + "ffn_norm", theirs + "final_layer_norm"),
            *[Rule(f"{ours}ffn.{w}_{n}", (f"{theirs}feed_forward.{layer}.{t}",))
              for n, layer in (("1", "intermediate_dense"), ("2", "output_dense"))
              for w, t in (("w", "weight"), ("b", "bias"))]]
