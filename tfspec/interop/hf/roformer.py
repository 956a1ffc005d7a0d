"""RoFormer (``model_type: roformer``): transformers' RoFormerModel, RoFormerForMaskedLM and the
task classes (*ForSequenceClassification, *ForTokenClassification, *ForQuestionAnswering) as
tfspec specs (junnyu/roformer_chinese_small, roformer_chinese_base, roformer_chinese_char_small,
roformer_chinese_char_base, roformer_small_discriminator and roformer_small_generator; Su et al.
2021).

BERT's post-norm encoder, its token type embeddings, embedding LayerNorm, masked-LM head and
tensor names (``bert.py``) under ``roformer.``, with these differences:

- no position table: rotary positions on the queries and keys of every layer (base 10,000 over
  each head's features, RoFormerSinusoidalPositionalEmbedding's frequencies, up to
  ``max_position_embeddings`` positions). RoFormer rotates interleaved pairs (x_0, x_1), (x_2,
  x_3), ... and tfspec halves, so each head's query and key rows (and biases) are held even
  ones first, then odd ones (``cohere.InterleavedRotary``: scores are unchanged when queries and
  keys permute their features alike). The sinusoid table transformers keeps as a frozen
  parameter (``encoder.embed_positions.weight``) is left out: tfspec computes it;
- no pooler: RoFormerModel gives the last hidden states alone;
- embeddings ``embedding_size`` wide; where that differs from ``hidden_size`` (the
  roformer_small generator and discriminator), their normed sum is projected to it by
  ``embeddings_project`` (``embed_projection``, as ELECTRA's) and the masked-LM head's dense layer
  maps back to the embeddings' width, its output tied to them; RoFormerModel's spec reads
  its hidden states back through the projection's transpose (``out: tied``);
- the masked-LM head and the sequence classifier apply ``hidden_act`` (BERT's pooler: tanh):
  RoFormerForSequenceClassification reads the first position through ``classifier.dense``,
  the layers' activation and ``classifier.out_proj``.

Refused by name: ``rotary_value: true`` (transformers then rotates the values too, and the
attention output stays rotated: tfspec's rotary positions turn queries and keys only),
``is_decoder`` (RoFormerForCausalLM) and a type_vocab_size below 1. Defaults are RoFormerConfig's.
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.bert import Bert, _dense
from tfspec.interop.hf.cohere import InterleavedRotary
from tfspec.interop.hf.family import Family, Rule, Source, activation, flag, number, register
from tfspec.interop.hf.task_heads import Pooled, TaskHeads
from tfspec.positions import rotary

DEFAULTS = {"vocab_size": 50000, "max_position_embeddings": 1536}
"""RoFormerConfig's values where BertConfig's (those ``Bert.spec_data`` falls back on) differ;
``embedding_size`` defaults to hidden_size."""
BASE = 10000.0
"""RoFormerSinusoidalPositionalEmbedding's wavelength base: fixed, no configuration field."""


class RoFormerTaskHeads(TaskHeads):
    """RoFormer's task classes: the sequence class's dense layer applies ``hidden_act``
    (RoFormerClassificationHead), which is the layers' activation, not a fixed one."""

    def _transform(self, c: dict, where: str) -> dict:
        return {"transform": {"activation": activation(c, "hidden_act", where, "gelu")}}

    def structure(self, spec) -> str | None:
        head = spec.head
        if head is not None and head.kind == "sequence_classification":
            layer = spec.plan("encoder")[0].ffn
            if head.transform is None or head.transform.activation != (layer.activation if layer else None):
                return (f"{self.title}'s sequence classifier reads the first position through a dense layer with "
                        "the layers' activation (hidden_act): set head.transform.activation to the spec's")
        return super().structure(spec)


@register
class RoFormer(Bert):
    model_type = "roformer"
    title = "RoFormer"
    architectures = {"RoFormerModel": "", "RoFormerForMaskedLM": "roformer."}
    export_architecture = "RoFormerModel"
    masked_lm = "RoFormerForMaskedLM"
    heads = ("cls.",)
    mapped = Bert.mapped + ("embedding_size", "rotary_value")
    required = {"is_decoder": (False,), "tie_word_embeddings": (True,)}
    """BERT's, without position_embedding_type (RoFormerConfig has none: a file that gives one is
    refused as unknown)."""
    defaults = DEFAULTS
    vocab_default = DEFAULTS["vocab_size"]
    task_heads = Pooled(classifier="classifier.out_proj", dense="classifier.dense", activation="gelu",
                        base_pooler=False)
    task_class = RoFormerTaskHeads

    def spec_data(self, source: Source) -> dict:
        c, where = DEFAULTS | source.config, source.where
        if flag(c, "rotary_value", where):
            raise TfspecError(f"{where}: rotary_value: true is not supported: transformers' RoFormer then rotates "
                              "the values by position too (and never turns the attention output back), and tfspec's "
                              "rotary positions turn queries and keys only; tfspec imports rotary_value false")
        hidden = number(c, "hidden_size", where, default=768)
        width = number(c, "embedding_size", where, default=hidden, nullable=True)
        width = hidden if width is None else width
        data = super().spec_data(replace(source, config=c)) | {"pooler": False}
        if width != hidden:
            data["embed_projection"] = {"width": width, "out": None if data["head_transform"] else "tied"}
        return data

    def _positional(self, c: dict, where: str) -> dict:
        return {"kind": "rotary", "base": BASE, "max_len": number(c, "max_position_embeddings", where,
                                                                   default=DEFAULTS["max_position_embeddings"])}

    def rules(self, spec, architecture: str) -> list[Rule]:
        """BERT's, without the position table, the embeddings' projection where there is one,
        each layer's query and key rows permuted from interleaved to halved rotary pairs."""
        rules = [r for r in super().rules(spec, architecture) if r.ir != "encoder.pos.weight"]
        if spec.embed_projection is not None:
            rules += _dense("encoder.project_in.weight", "encoder.project_in.bias", "embeddings_project")
        plans = {layer.names[0]: layer.attention for layer in spec.plan("encoder")}
        out = []
        for rule in rules:
            name, _, kind = rule.ir.rpartition(".")
            if kind in ("w_qkv", "b_qkv"):
                a = plans[name]
                rule = replace(rule, layout=InterleavedRotary(width=a.d_k, rotary=rotary.rotated(a.positions, a.d_k),
                                                              rotated=(a.heads + a.kv_heads) * a.d_k))
            out.append(rule)
        return out

    def dropped(self, architecture: str) -> dict[str, str]:
        return super().dropped(architecture) | {
            "encoder.embed_positions.weight": "the sinusoid table of the rotary positions, which tfspec computes"}

    def count_differences(self, spec, architecture: str) -> list[tuple[int, str]]:
        """transformers keeps the rotary sinusoids (max_position_embeddings x head_dim) as a frozen
        parameter, which num_parameters() counts."""
        d_k = spec.plan("encoder")[0].attention.d_k
        return [(spec.positional.max_len * d_k, "sinusoid table it stores as parameters (tfspec computes it)")]

    def structure(self, spec) -> str | None:
        if reason := Family.structure(self, spec):
            return reason
        if spec.positional.kind != "rotary":
            return f"{self.title} rotates queries and keys (positional rotary), not {spec.positional.kind}"
        if spec.segments < 1:
            return f"{self.title} always adds segment (token type) embeddings: set segments: 1 or more"
        if spec.pooler:
            return f"transformers' {self.export_architecture} has no pooler: drop pooler"
        return None

    def outputs(self, architecture: str) -> dict[str, str]:
        return {"memory": "last_hidden_state"} if architecture == self.export_architecture else {"logits": "logits"}

    def config(self, spec) -> dict:
        return super().config(spec) | {"embedding_size": spec.embed_width, "rotary_value": False}

