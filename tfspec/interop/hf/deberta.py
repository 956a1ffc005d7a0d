"""DeBERTa v1 (``model_type: deberta``): transformers' DebertaModel, DebertaForMaskedLM and (through
``task_heads.py``) DebertaForSequenceClassification, DebertaForTokenClassification and
DebertaForQuestionAnswering as tfspec specs, where the configuration leaves relative attention
off (DebertaConfig's own default; He et al. 2021).

BERT's post-norm encoder as DeBERTa-v2 computes it (``deberta_v2.py``: the embeddings'
LayerNorm, the legacy masked-LM head under ``cls.predictions`` with its output tied to the token
embedding and a bias of its own, the ContextPooler of the task classes), with v1's own
attention weights: one fused ``in_proj`` without bias, stored head by head (each head's query,
key and value rows together, as ``transpose_for_scores`` then ``chunk(3)`` reads them:
``layouts.PerHead``), plus ``q_bias`` and ``v_bias``, so keys have no bias (``biases: {k:
false}``). Scores are scaled by 1 / sqrt(d_k x (1 + the number of pos_att_type terms)) even
without relative attention, as DisentangledSelfAttention does; learned positions are added to
the embeddings where ``position_biased_input`` (the default), none otherwise; token types
where type_vocab_size > 0.

Refused by name: ``relative_attention: true``, which every published v1 checkpoint sets
(microsoft/deberta-base, deberta-large, deberta-xlarge and their MNLI fine-tunes). tfspec's
disentangled kind computes v2's relative attention: the table projected by each layer's own
query and key weights (share_att_key) over log-bucketed distances. v1 projects it with
position weights of its own (``pos_proj`` for c2p, without bias; ``pos_q_proj`` for p2c, with
bias) over distances clipped to +-max_relative_positions (no buckets); no choice of tfspec's
table or buckets computes that exactly, so those checkpoints are refused until the disentangled
kind holds separate position projections and unbucketed distances. Refused too: talking_head,
embedding_size other than hidden_size, hidden_size not a multiple of num_attention_heads, and
DebertaForMaskedLM with legacy false (its head under lm_predictions; DebertaModel imports such
checkpoints). Defaults are DebertaConfig's (deberta-base's shape, without relative attention).
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf.deberta_v2 import TERMS, DebertaV2, block_rules, embedding_rules
from tfspec.interop.hf.family import (ACTIVATION_NAMES, Rule, Source, _show, activation, flag, number, register,
                                      repeated_layer)
from tfspec.interop.hf.layouts import PerHead
from tfspec.interop.hf.masked_lm import MaskedLM


@register
class Deberta(DebertaV2):
    model_type = "deberta"
    default_vocab = 50265  # deberta-base's
    title = "DeBERTa"
    architectures = {"DebertaModel": "", "DebertaForMaskedLM": "deberta."}
    export_architecture = "DebertaModel"
    masked_lm = "DebertaForMaskedLM"
    heads = ("cls.", "lm_predictions.")
    special_tokens = {"bos_id": ("[CLS]", 1), "eos_id": ("[SEP]", 2), "unk_id": ("[UNK]", 3),
                      "mask_id": ("[MASK]", 50264)}
    """Where deberta-base's vocabulary (GPT-2's byte-level BPE after [PAD] [CLS] [SEP] [UNK]) puts them."""
    mapped = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
              "type_vocab_size", "layer_norm_eps", "pad_token_id", "relative_attention", "max_relative_positions",
              "position_biased_input", "pos_att_type", "legacy", "embedding_size")
    required = MaskedLM.required | {"talking_head": (False,)}
    """talking_head is no DebertaConfig field, but DisentangledSelfAttention reads it
    (``getattr(config, "talking_head", False)``): true mixes the heads' logits and weights."""
    ignored = {**dict.fromkeys(("bos_token_id", "eos_token_id"), "DeBERTa's computation reads no bos/eos id"),
               **dict.fromkeys(("pooler_hidden_size", "pooler_hidden_act"), "read by the ContextPooler of "
                               "DebertaForSequenceClassification only (task_heads.py)"),
               "pooler_dropout": "dropout of the ContextPooler's input: training only",
               "cls_dropout": "dropout before DebertaForSequenceClassification's classifier: training only"}

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        mlm = self.reads_head(source)
        legacy = flag(c, "legacy", where, True)  # read with or without the masked-LM head
        if mlm and not legacy:
            raise TfspecError(f"{where}: legacy: false is not supported with {source.architecture}; tfspec imports its "
                              "masked-LM head as legacy: true stores it (cls.predictions)")
        d_model = number(c, "hidden_size", where, default=768)
        heads = number(c, "num_attention_heads", where, default=12)
        if heads < 1 or d_model % heads:
            raise TfspecError(f"{where}: hidden_size ({d_model}) must be a multiple of num_attention_heads ({heads}), "
                              f"as {self.title}'s attention splits it into heads")
        if number(c, "embedding_size", where, default=d_model) != d_model:
            raise TfspecError(f"{where}: embedding_size: {_show(c['embedding_size'])} is not supported; tfspec imports "
                              f"{self.title} with embeddings as wide as hidden_size ({d_model})")
        d_k, terms = d_model // heads, self._terms(c, where)
        layer = {"kind": "self_attention"} | ({"scale": (d_k * (1 + len(terms))) ** -0.5} if terms else {})
        return {"family": self.family, "vocab": self._vocab(source), "d_model": d_model, "heads": heads,
                "d_k": d_k, "d_v": d_k, "d_ff": number(c, "intermediate_size", where, default=3072),
                "activation": activation(c, "hidden_act", where, "gelu"),
                "dropout": number(c, "hidden_dropout_prob", where, float, 0.1),
                "attention_dropout": number(c, "attention_probs_dropout_prob", where, float, 0.1),
                "label_smoothing": 0.0, "positional": self._positional(c, where, terms),
                "segments": number(c, "type_vocab_size", where, default=0), "biases": {"k": False},
                "embed_norm": True, "embed_scale": False, "norm": "post", "final_norm": False,
                "norm_eps": number(c, "layer_norm_eps", where, float, 1e-7),
                "head_transform": mlm, "output_bias": mlm, "tie_embeddings": "output",
                "encoder": {"layers": number(c, "num_hidden_layers", where, default=12), "block": [layer, "ffn"]}}

    def _terms(self, c: dict, where: str) -> list[str]:
        """DeBERTa-v2's reading, a term named twice refused: transformers scales by 1 + the
        list's length, which tfspec's terms (each at most once) cannot say."""
        value = c.get("pos_att_type")
        listed = [t.strip() for t in value.lower().split("|")] if isinstance(value, str) else value
        if isinstance(listed, list) and len(set(map(str, listed))) < len(listed):
            raise TfspecError(f"{where}: pos_att_type: {_show(value)} is not supported; tfspec computes a list "
                              f"naming each of {' and '.join(TERMS)} at most once")
        return super()._terms(c, where)

    def _positional(self, c: dict, where: str, terms: list[str]) -> dict:
        """Learned positions where position_biased_input, none otherwise; relative attention refused
        (the module docstring says why)."""
        max_len = number(c, "max_position_embeddings", where, default=512)
        number(c, "max_relative_positions", where, default=-1)  # read whether relative or not
        biased = flag(c, "position_biased_input", where, True)
        if flag(c, "relative_attention", where):
            raise TfspecError(f"{where}: relative_attention: true is not supported; {self.title} v1 projects its "
                              "relative table with position weights of its own (pos_proj, pos_q_proj) over distances "
                              "clipped to max_relative_positions, and tfspec's disentangled attention computes "
                              "DeBERTa-v2's (the layers' query and key weights, log buckets): model_type deberta-v2 "
                              "or relative_attention false")
        return {"kind": "learned" if biased else "none", "max_len": max_len}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = embedding_rules(spec)
        for layer in spec.plan("encoder"):
            ours, theirs = f"encoder.layers.{layer.index}.", f"encoder.layer.{layer.index}."
            attention = theirs + "attention.self."
            rules += [Rule(ours + "self_attn.w_qkv", (attention + "in_proj.weight",), PerHead(layer.attention.heads)),
                      Rule(ours + "self_attn.b_q", (attention + "q_bias",)),
                      Rule(ours + "self_attn.b_v", (attention + "v_bias",)),
                      *block_rules(ours, theirs)]
        return rules + self.head_rules(spec)  # under cls.predictions (legacy, as export writes it)

    def dropped(self, architecture: str) -> dict[str, str]:
        dropped = MaskedLM.dropped(self, architecture) | {
            "embeddings.position_ids": "a buffer of position indices, not a weight",
            "embeddings.position_embeddings.weight": "a position table transformers does not load where "
                                                     "position_biased_input is false (its "
                                                     "_keys_to_ignore_on_load_unexpected)"}
        if architecture == self.export_architecture:
            return dropped
        return dropped | {"lm_predictions.*": "the head legacy: false reads; with legacy true transformers reads "
                                              "cls.predictions"}

    def structure(self, spec) -> str | None:
        if reason := MaskedLM.structure(self, spec):
            return reason
        if spec.positional.kind not in ("learned", "none"):
            return (f"{self.title} v1's positions are learned or none as tfspec computes them, not "
                    f"{spec.positional.kind} (disentangled positions: DeBERTa-v2)")
        return None

    def config(self, spec) -> dict:
        attention, ffn = repeated_layer(spec, "encoder")
        p = spec.positional
        terms = round(attention.score_scale(attention.d_k) ** -2 / attention.d_k) - 1
        return {"architectures": [self.architecture_for(spec)], "model_type": self.model_type,
                "vocab_size": spec.vocab.size, "hidden_size": spec.d_model,
                "num_hidden_layers": spec.encoder.num_layers, "num_attention_heads": attention.heads,
                "intermediate_size": ffn.d_ff,
                "hidden_act": ACTIVATION_NAMES[ffn.activation], "hidden_dropout_prob": spec.dropout,
                "attention_probs_dropout_prob": spec.attention_dropout, "max_position_embeddings": p.max_len,
                "type_vocab_size": spec.segments, "layer_norm_eps": spec.norm_eps, "pad_token_id": spec.vocab.pad_id,
                "relative_attention": False, "position_biased_input": p.kind == "learned",
                "pos_att_type": list(TERMS[:max(0, terms)]), "legacy": True, "tie_word_embeddings": True}
