"""DistilBERT (``model_type: distilbert``): transformers' DistilBertModel and
DistilBertForMaskedLM as tfspec specs.

BERT's computation (``bert.py``: post-norm layers, learned positions, a LayerNorm on the
embeddings, the masked-LM head's dense + activation + LayerNorm before the tied output with a
bias) without token types or a pooler, every LayerNorm at eps 1e-12 (fixed in transformers'
code, no config field), and its own names: ``dim``, ``hidden_dim``, ``n_heads``,
``n_layers``, ``activation`` (used by the head too, as BERT's ``hidden_act`` is). BERT's
WordPiece vocabulary names the special tokens, as in BERT.

``sinusoidal_pos_embds`` only initialises the position table: the checkpoint stores it and
transformers reads it back (transformers 5 even trains it), so both values import as a learned
table holding the stored rows, and transformers' parameter count includes it either way.
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf.bert import Bert, _dense
from tfspec.interop.hf.family import (ACTIVATION_NAMES, Family, Rule, Source, _show, activation, norm_rules, number,
                                      register, repeated_layer)
from tfspec.interop.hf.layouts import Concat
from tfspec.interop.hf.task_heads import Pooled

NORM_EPS = 1e-12
"""The eps of every DistilBERT LayerNorm, written into transformers' code."""


@register
class DistilBert(Bert):
    model_type = "distilbert"
    title = "DistilBERT"
    architectures = {"DistilBertModel": "", "DistilBertForMaskedLM": "distilbert."}
    export_architecture = "DistilBertModel"
    masked_lm = "DistilBertForMaskedLM"
    heads = ("vocab_transform.", "vocab_layer_norm.", "vocab_projector.")
    mapped = ("vocab_size", "dim", "n_layers", "n_heads", "hidden_dim", "activation", "dropout", "attention_dropout",
              "max_position_embeddings", "sinusoidal_pos_embds", "pad_token_id")
    required = {"tie_word_embeddings": (True,)}
    task_heads = Pooled(dense="pre_classifier", activation="relu", base_pooler=False)
    ignored = {**{key: Bert.ignored[key] for key in ("bos_token_id", "eos_token_id")},
               **dict.fromkeys(("qa_dropout", "seq_classif_dropout"), "dropout of task heads: training only"),
               "tie_weights_": "left over from older transformers (distilbert-base-uncased's config), which tied the "
                               "output as tie_word_embeddings now says"}

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        mlm = source.architecture == self.masked_lm
        if not isinstance(c.get("sinusoidal_pos_embds", False), bool):
            raise TfspecError(f"{where}: sinusoidal_pos_embds must be true or false, got "
                              f"{_show(c['sinusoidal_pos_embds'])}")
        size = number(c, "vocab_size", where, default=self.vocab_default)
        return {"family": self.family, "vocab": {"size": size, **self._special_ids(source, size)},
                "d_model": number(c, "dim", where, default=768), "heads": number(c, "n_heads", where, default=12),
                "d_ff": number(c, "hidden_dim", where, default=3072),
                "activation": activation(c, "activation", where, "gelu"),
                "dropout": number(c, "dropout", where, float, 0.1),
                "attention_dropout": number(c, "attention_dropout", where, float, 0.1), "label_smoothing": 0.0,
                "positional": {"kind": "learned", "max_len": number(c, "max_position_embeddings", where, default=512)},
                "segments": 0, "embed_norm": True, "pooler": False, "head_transform": mlm, "output_bias": mlm,
                "norm": "post", "norm_eps": NORM_EPS, "final_norm": False, "tie_embeddings": "output",
                "embed_scale": False,
                "encoder": {"layers": number(c, "n_layers", where, default=6), "block": ["self_attention", "ffn"]}}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("encoder.embed.weight", ("embeddings.word_embeddings.weight",)),
                 Rule("encoder.pos.weight", ("embeddings.position_embeddings.weight",)),
                 *norm_rules("encoder.embed_norm", "embeddings.LayerNorm")]
        for i in range(spec.encoder.num_layers):
            ours, theirs = f"encoder.layers.{i}.", f"transformer.layer.{i}."
            qkv = [f"{theirs}attention.{part}_lin" for part in ("q", "k", "v")]
            rules += [Rule(ours + "self_attn.w_qkv", tuple(f"{p}.weight" for p in qkv), Concat()),
                      Rule(ours + "self_attn.b_qkv", tuple(f"{p}.bias" for p in qkv), Concat()),
                      *_dense(ours + "self_attn.w_o", ours + "self_attn.b_o", theirs + "attention.out_lin"),
                      *norm_rules(ours + "self_attn_norm", theirs + "sa_layer_norm"),
                      *_dense(ours + "ffn.w_1", ours + "ffn.b_1", theirs + "ffn.lin1"),
                      *_dense(ours + "ffn.w_2", ours + "ffn.b_2", theirs + "ffn.lin2"),
                      *norm_rules(ours + "ffn_norm", theirs + "output_layer_norm")]
        if spec.head_transform:
            rules += [*_dense("head.dense.weight", "head.dense.bias", "vocab_transform"),
                      *norm_rules("head.norm", "vocab_layer_norm"), Rule("output.bias", ("vocab_projector.bias",))]
        return rules

    def dropped(self, architecture: str) -> dict[str, str]:
        dropped = {"embeddings.position_ids": "a buffer of position indices, not a weight"}
        if architecture == self.export_architecture:
            return dropped | {f"{head}*": f"the masked-LM head, not part of {architecture}" for head in self.heads}
        return dropped | {"vocab_projector.weight": "the output projection, tied to the token embedding"}

    def structure(self, spec) -> str | None:
        if reason := Family.structure(self, spec):
            return reason
        if spec.segments:
            return "DistilBERT adds no segment (token type) embeddings: set segments: 0"
        if spec.pooler:
            return "transformers' DistilBERT has no pooler: drop pooler"
        return None

    def outputs(self, architecture: str) -> dict[str, str]:
        return {"memory": "last_hidden_state"} if architecture == self.export_architecture else {"logits": "logits"}

    def config(self, spec) -> dict:
        attention, ffn = repeated_layer(spec, "encoder")
        return {"architectures": [self.architecture_for(spec)], "model_type": self.model_type,
                "vocab_size": spec.vocab.size, "dim": spec.d_model, "n_layers": spec.encoder.num_layers,
                "n_heads": attention.heads, "hidden_dim": ffn.d_ff, "activation": ACTIVATION_NAMES[ffn.activation],
                "dropout": spec.dropout, "attention_dropout": spec.attention_dropout,
                "max_position_embeddings": spec.positional.max_len, "sinusoidal_pos_embds": False,
                "pad_token_id": spec.vocab.pad_id, "tie_word_embeddings": True}
