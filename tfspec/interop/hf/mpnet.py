"""MPNet (``model_type: mpnet``): transformers' MPNetModel, MPNetForMaskedLM and (through
``task_heads.py``) MPNetForSequenceClassification, MPNetForTokenClassification and
MPNetForQuestionAnswering as tfspec specs (microsoft/mpnet-base; the sentence encoders built on
it, sentence-transformers/all-mpnet-base-v2, multi-qa-mpnet-base-dot-v1, paraphrase-mpnet-base-v2,
whose MPNetModel gives the token embeddings they pool; Song et al. 2020).

RoBERTa's computation (``roberta.py``: learned positions from row padding_idx + 1 = 2, the
embeddings' LayerNorm, post-norm layers, ``lm_head`` with exact GELU and its output tied to the
token embedding, the tanh classification head of the sequence class) with two differences:

- no token type embeddings (``segments: 0``);
- T5's bucketed relative attention bias added to every layer's scaled logits (positional kind
  ``relative_bias``, ``tfspec.layers.relative_bias``): bidirectional, 32 buckets (half per
  sign of the distance, 8 of them exact), log-spaced up to 128, one (32, heads) table
  (``encoder.relative_attention_bias``) computed once and shared by all layers, beside the
  learned absolute positions.

transformers' MPNet hard-codes both the padding row and the bucket count: positions count the
tokens that are not id 1 (``padding_idx = 1`` whatever pad_token_id says) and
``compute_position_bias`` buckets into 32 whatever relative_attention_num_buckets says (a
larger table's other rows are never read, a smaller one fails); so pad_token_id 1 and
relative_attention_num_buckets 32 are required, as every published checkpoint has them.
Defaults are MPNetConfig's (mpnet-base's shape, whose 514 position rows are 512 positions).
"""

from __future__ import annotations

from tfspec.interop.hf.bert import _dense
from tfspec.interop.hf.family import Family, Rule, Source, norm_rules, register
from tfspec.interop.hf.layouts import Concat
from tfspec.interop.hf.roberta import Roberta

BUCKETS, REACH = 32, 128
"""``MPNetEncoder.compute_position_bias``'s num_buckets and ``relative_position_bucket``'s
max_distance: arguments' defaults, no configuration field."""


@register
class MPNet(Roberta):
    model_type = "mpnet"
    title = "MPNet"
    architectures = {"MPNetModel": "", "MPNetForMaskedLM": "mpnet."}
    export_architecture = "MPNetModel"
    masked_lm = "MPNetForMaskedLM"
    mapped = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
              "layer_norm_eps", "bos_token_id", "eos_token_id")
    required = {"tie_word_embeddings": (True,), "pad_token_id": (1,), "relative_attention_num_buckets": (BUCKETS,)}
    """The two hard-coded settings (the module docstring), and the masked-LM output tied to the embedding."""
    ignored = {}
    vocab_default = 30527

    def spec_data(self, source: Source) -> dict:
        """RoBERTa's spec without token types, each layer's attention adding the stack's relative
        bias (its own ``positions``, as the spec's ``positional`` holds the learned table; the
        first layer declares the table and the others tie to it, ``stack_param``)."""
        data = super().spec_data(source)
        block = [{"kind": "self_attention", "positions": {"kind": "relative_bias", "buckets": BUCKETS,
                                                          "max_distance": REACH}}, "ffn"]
        return data | {"segments": 0, "encoder": data["encoder"] | {"block": block}}

    def _special_ids(self, source: Source, size: int) -> dict:
        """RoBERTa's, but unk is MPNetTokenizer's [UNK] (mpnet-base's 104: BERT's WordPiece
        vocabulary after <s> <pad> </s> <unk>); only tokenizers read it."""
        ids = super()._special_ids(source, size)
        return ids | {"unk_id": source.vocabulary.get("[UNK]", 104 if 104 < size else ids["unk_id"])}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("encoder.embed.weight", ("embeddings.word_embeddings.weight",)),
                 Rule("encoder.pos.weight", ("embeddings.position_embeddings.weight",)),
                 *norm_rules("encoder.embed_norm", "embeddings.LayerNorm"),
                 Rule("encoder.layers.0.self_attn.rel_bias", ("encoder.relative_attention_bias.weight",))]
        for i in range(spec.encoder.num_layers):
            ours, theirs = f"encoder.layers.{i}.", f"encoder.layer.{i}."
            qkv = [f"{theirs}attention.attn.{part}" for part in "qkv"]
            rules += [Rule(ours + "self_attn.w_qkv", tuple(f"{p}.weight" for p in qkv), Concat()),
                      Rule(ours + "self_attn.b_qkv", tuple(f"{p}.bias" for p in qkv), Concat()),
                      *_dense(ours + "self_attn.w_o", ours + "self_attn.b_o", theirs + "attention.attn.o"),
                      *norm_rules(ours + "self_attn_norm", theirs + "attention.LayerNorm"),
                      *_dense(ours + "ffn.w_1", ours + "ffn.b_1", theirs + "intermediate.dense"),
                      *_dense(ours + "ffn.w_2", ours + "ffn.b_2", theirs + "output.dense"),
                      *norm_rules(ours + "ffn_norm", theirs + "output.LayerNorm")]
        if spec.pooler:
            rules += _dense("encoder.pooler.w_pool", "encoder.pooler.b_pool", "pooler.dense")
        return rules + (self._head_rules() if spec.head_transform else [])

    def structure(self, spec) -> str | None:
        if reason := Family.structure(self, spec):
            return reason
        if spec.segments:
            return f"{self.title} adds no segment (token type) embeddings: set segments: 0"
        if spec.pooler and spec.head_transform:
            return f"transformers' {self.masked_lm} has no pooler: drop pooler or head_transform"
        if not (spec.pooler or spec.head_transform):
            return (f"transformers' {self.export_architecture} has a pooler: set pooler: true (or head_transform "
                    f"for {self.masked_lm})")
        if spec.head_transform and spec.activation != "gelu":
            return f"{self.title}'s masked-LM head applies exact GELU: set activation: gelu"
        return None

    def config(self, spec) -> dict:
        config = {k: v for k, v in super().config(spec).items() if k != "type_vocab_size"}
        attention = spec.plan("encoder")[0].attention
        buckets = attention.positions.buckets if attention.positions.kind == "relative_bias" else 0
        return config | {"relative_attention_num_buckets": buckets}
