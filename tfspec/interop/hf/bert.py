"""BERT (``model_type: bert``): transformers' BertModel and BertForMaskedLM as tfspec specs.

A post-norm encoder with learned positions, segment (token type) embeddings and a LayerNorm
on the embeddings (``specs/zoo/bert-base.yaml``); BertModel adds the [CLS] pooler,
BertForMaskedLM the masked-LM head (dense + activation + LayerNorm, output tied to the token
embedding, with a bias) and no pooler. Query, key and value are separate matrices in the
checkpoint and one ``w_qkv`` (their rows stacked) in tfspec. Defaults are BertConfig's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import (ACTIVATION_NAMES, Family, Rule, Source, activation, norm_rules, number,
                                      register, repeated_layer)
from tfspec.interop.hf.layouts import Concat
from tfspec.interop.hf.task_heads import Pooled

SPECIAL_TOKENS = {"unk_id": "[UNK]", "bos_id": "[CLS]", "eos_id": "[SEP]", "mask_id": "[MASK]"}
UNCASED_IDS = {"unk_id": 100, "bos_id": 101, "eos_id": 102, "mask_id": 103}
"""Where bert-base-uncased's WordPiece vocabulary puts them, when no vocab.txt says otherwise."""


@register
class Bert(Family):
    model_type = "bert"
    family = "encoder-only"
    title = "BERT"
    architectures = {"BertModel": "", "BertForMaskedLM": "bert.", "BertForPreTraining": "bert."}
    export_architecture = "BertModel"
    masked_lm = "BertForMaskedLM"
    """The architecture export writes for a spec with the masked-LM head."""
    heads = ("cls.",)
    mapped = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
              "type_vocab_size", "layer_norm_eps", "pad_token_id")
    required = {"position_embedding_type": ("absolute",), "is_decoder": (False,), "tie_word_embeddings": (True,)}
    free = Family.free + ("vocab.bos_id", "vocab.eos_id")
    ignored = {"bos_token_id": "BERT's computation reads no bos/eos id (its [CLS]/[SEP] ids are the tokenizer's)",
               "eos_token_id": "BERT's computation reads no bos/eos id (its [CLS]/[SEP] ids are the tokenizer's)",
               **dict.fromkeys(("directionality", "pooler_fc_size", "pooler_num_attention_heads",
                                "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type"),
                               "left over from the TensorFlow release; transformers' BERT reads none of them")}
    vocab_default = 30522
    """The configuration class's vocab_size, for a config.json that leaves it out."""
    task_heads = Pooled()

    def spec_data(self, source: Source) -> dict:
        source = replace(source, config=self.defaults | source.config)
        c, where = source.config, source.where
        mlm = self.architectures[source.architecture] != ""  # the base model's tensors sit under a head's prefix
        pooler = not mlm and (source.names is None or "pooler.dense.weight" in source.names)
        size = number(c, "vocab_size", where, default=self.vocab_default)
        segments = number(c, "type_vocab_size", where, default=2)
        if segments < 1:
            raise TfspecError(f"{where}: type_vocab_size must be at least 1: BERT always adds token type embeddings")
        d_model = number(c, "hidden_size", where, default=768)
        return {"family": self.family, "vocab": {"size": size, **self._special_ids(source, size)},
                "d_model": d_model, "heads": number(c, "num_attention_heads", where, default=12),
                "d_ff": number(c, "intermediate_size", where, default=3072),
                "activation": activation(c, "hidden_act", where, "gelu"),
                "dropout": number(c, "hidden_dropout_prob", where, float, 0.1),
                "attention_dropout": number(c, "attention_probs_dropout_prob", where, float, 0.1),
                "label_smoothing": 0.0,
                "positional": self._positional(c, where),
                "segments": segments, "embed_norm": True,
                "pooler": pooler, "head_transform": mlm, "output_bias": mlm, "norm": "post",
                "norm_eps": number(c, "layer_norm_eps", where, float, 1e-12), "final_norm": False,
                "tie_embeddings": "output", "embed_scale": False,
                "encoder": {"layers": number(c, "num_hidden_layers", where, default=12),
                            "block": ["self_attention", "ffn"]}}

    def _positional(self, c: dict, where: str) -> dict:
        return {"kind": "learned", "max_len": number(c, "max_position_embeddings", where, default=512)}

    def _special_ids(self, source: Source, size: int) -> dict:
        """pad from the config (it masks keys); the others only name tokens for training and
        tokenizers: from vocab.txt when present, else bert-base-uncased's places."""
        pad = 0 if source.config.get("pad_token_id") is None else number(source.config, "pad_token_id", source.where)
        found = {key: source.vocabulary[token] for key, token in SPECIAL_TOKENS.items() if token in source.vocabulary}
        if len(found) == len(SPECIAL_TOKENS):
            return {"pad_id": pad, **found}
        if max(UNCASED_IDS.values()) < size and pad not in UNCASED_IDS.values():
            return {"pad_id": pad, **UNCASED_IDS}
        return {"pad_id": pad, **dict(zip(SPECIAL_TOKENS, (i for i in range(size) if i != pad)))}

    def rename(self, name: str) -> str:
        # Checkpoints converted from TensorFlow name LayerNorm parameters gamma and beta.
        if ".LayerNorm." in name:
            return name.replace(".LayerNorm.gamma", ".LayerNorm.weight").replace(".LayerNorm.beta", ".LayerNorm.bias")
        return name

    sentence_head = "next-sentence head (cls.seq_relationship)"
    """*ForPreTraining's sentence classifier, which tfspec does not import."""

    def count_differences(self, spec, architecture: str) -> list[tuple[int, str]]:
        """*ForPreTraining holds a pooler and a two-way sentence classifier beside the masked-LM
        head; tfspec imports the masked LM alone."""
        if not architecture.endswith("ForPreTraining"):
            return []
        d = spec.d_model
        return [(d * d + d, "pooler it holds, which tfspec does not import"),
                (2 * d + 2, f"{self.sentence_head}, which tfspec does not import")]

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("encoder.embed.weight", ("embeddings.word_embeddings.weight",)),
                 Rule("encoder.pos.weight", ("embeddings.position_embeddings.weight",)),
                 Rule("encoder.segment.weight", ("embeddings.token_type_embeddings.weight",)),
                 *norm_rules("encoder.embed_norm", "embeddings.LayerNorm")]
        for i in range(spec.encoder.num_layers):
            ours, theirs = f"encoder.layers.{i}.", f"encoder.layer.{i}."
            qkv = [f"{theirs}attention.self.{part}" for part in ("query", "key", "value")]
            rules += [Rule(ours + "self_attn.w_qkv", tuple(f"{p}.weight" for p in qkv), Concat()),
                      Rule(ours + "self_attn.b_qkv", tuple(f"{p}.bias" for p in qkv), Concat()),
                      *_dense(ours + "self_attn.w_o", ours + "self_attn.b_o", theirs + "attention.output.dense"),
                      *norm_rules(ours + "self_attn_norm", theirs + "attention.output.LayerNorm"),
                      *_dense(ours + "ffn.w_1", ours + "ffn.b_1", theirs + "intermediate.dense"),
                      *_dense(ours + "ffn.w_2", ours + "ffn.b_2", theirs + "output.dense"),
                      *norm_rules(ours + "ffn_norm", theirs + "output.LayerNorm")]
        if spec.pooler:
            rules += _dense("encoder.pooler.w_pool", "encoder.pooler.b_pool", "pooler.dense")
        return rules + (self._head_rules() if spec.head_transform else [])

    def _head_rules(self) -> list[Rule]:
        """The masked-LM head: dense, LayerNorm and the output's bias (its matrix is the embedding)."""
        return [*_dense("head.dense.weight", "head.dense.bias", "cls.predictions.transform.dense"),
                *norm_rules("head.norm", "cls.predictions.transform.LayerNorm"),
                Rule("output.bias", ("cls.predictions.bias",))]

    def dropped(self, architecture: str) -> dict[str, str]:
        dropped = {"embeddings.position_ids": "a buffer of position indices, not a weight"}
        if architecture == self.export_architecture:
            return dropped | {"cls.*": f"pre-training heads, not part of {architecture}"}
        return dropped | {"cls.predictions.decoder.*": "the output projection, tied to the token embedding",
                          "cls.seq_relationship.*": "the next-sentence head, which tfspec does not import",
                          "pooler.*": f"{architecture} has no pooler"}

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if spec.segments < 1:
            return f"{self.title} always adds segment (token type) embeddings: set segments: 1 or more"
        if spec.pooler and spec.head_transform:
            return f"transformers' {self.masked_lm} has no pooler: drop pooler or head_transform"
        if not (spec.pooler or spec.head_transform):
            return (f"transformers' {self.export_architecture} always has a pooler: set pooler: true (or "
                    f"head_transform for {self.masked_lm})")
        return None

    def architecture_for(self, spec) -> str:
        return self.masked_lm if spec.head_transform else self.export_architecture

    def outputs(self, architecture: str) -> dict[str, str]:
        if architecture == self.export_architecture:
            return {"memory": "last_hidden_state", "pooled": "pooler_output"}
        return {"logits": "logits"}

    def config(self, spec) -> dict:
        attention, ffn = repeated_layer(spec, "encoder")
        return {"architectures": [self.architecture_for(spec)], "model_type": self.model_type,
                "vocab_size": spec.vocab.size, "hidden_size": spec.d_model,
                "num_hidden_layers": spec.encoder.num_layers, "num_attention_heads": attention.heads,
                "intermediate_size": ffn.d_ff,
                "hidden_act": ACTIVATION_NAMES[ffn.activation], "hidden_dropout_prob": spec.dropout,
                "attention_probs_dropout_prob": spec.attention_dropout,
                "max_position_embeddings": spec.positional.max_len, "type_vocab_size": spec.segments,
                "layer_norm_eps": spec.norm_eps, "pad_token_id": spec.vocab.pad_id, "tie_word_embeddings": True}


class PreNorm:
    """Mixed into a BERT-shaped family whose LayerNorms sit as Megatron-LM and fairseq's XL models
    put them (Megatron-BERT, XLM-RoBERTa-XL): none on the embeddings, one before each sub-layer
    in the place of BERT's post-norm one (``pre_norms`` renames BERT's tensor to the family's),
    and one after the last layer (``final_norm``), which the pooler and the head read."""

    pre_norms: ClassVar[tuple[tuple[str, str], ...]]
    """(BERT's LayerNorm name, the family's) per sub-layer: the self-attention's first, as BERT's
    second name ends the first."""
    final_norm: ClassVar[str]

    def spec_data(self, source: Source) -> dict:
        return super().spec_data(source) | {"norm": "pre", "final_norm": True, "embed_norm": False}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [replace(rule, hf=tuple(self._pre_norm(name) for name in rule.hf))
                 for rule in super().rules(spec, architecture) if not rule.ir.startswith("encoder.embed_norm.")]
        return rules + norm_rules("encoder.norm", self.final_norm)

    def _pre_norm(self, name: str) -> str:
        for bert, own in self.pre_norms:
            if f".{bert}" in name:
                return name.replace(f".{bert}", f".{own}")
        return name


def _dense(weight: str, bias: str, theirs: str) -> list[Rule]:
    return [Rule(weight, (f"{theirs}.weight",)), Rule(bias, (f"{theirs}.bias",))]
