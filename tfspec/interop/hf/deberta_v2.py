"""DeBERTa-v2 and v3 (``model_type: deberta-v2``): transformers' DebertaV2Model and
DebertaV2ForMaskedLM as tfspec specs (microsoft/deberta-v3-base, -large, deberta-v2-xlarge
without its convolution; He et al. 2021).

BERT's post-norm encoder (``bert.py``: embeddings LayerNorm, the masked-LM head's dense +
activation + LayerNorm and its output tied to the token embedding with a bias) with:

- positions inside attention when ``relative_attention``: DeBERTa's disentangled attention
  (positional kind ``disentangled``, ``tfspec.layers.disentangled``), one table of 2 x
  position_buckets relative embeddings (normalised when norm_rel_ebd says layer_norm) that each
  layer projects with its own query and key weights (``share_att_key``), its c2p and p2c products
  added to the logits as ``pos_att_type`` lists them; distances log-bucketed up to
  ``max_relative_positions`` (max_position_embeddings when -1);
- scores scaled by 1 / sqrt(d_k x (1 + the number of pos_att_type terms)), the attention's
  ``scale``;
- a learned position table only where ``position_biased_input`` (DebertaV2Config's default,
  without relative attention), token types only where type_vocab_size > 0 (none published);
- projections named query_proj, key_proj, value_proj; the masked-LM head under
  ``cls.predictions`` (``legacy``: true, the default).

Refused by name: the convolution after the first layer (``conv_kernel_size``: deberta-v2-xlarge
and -xxlarge), position_biased_input together with relative_attention, separate position
projections (share_att_key false), relative attention without buckets or without pos_att_type,
embedding_size other than hidden_size, and DebertaV2ForMaskedLM with legacy false (its head
under lm_predictions: DebertaV2Model imports such checkpoints). Defaults are DebertaV2Config's (deberta-v2-xlarge's
shape, without relative attention).
"""

from __future__ import annotations

from typing import ClassVar

from tfspec.errors import TfspecError
from tfspec.interop.hf.bert import _dense
from tfspec.interop.hf.family import (ACTIVATION_NAMES, Rule, Source, _show, activation, flag, norm_rules,
                                      number, register, repeated_layer)
from tfspec.interop.hf.layouts import Concat
from tfspec.interop.hf.masked_lm import MaskedLM
from tfspec.interop.hf.task_heads import Pooled

TERMS = ("c2p", "p2c")
"""pos_att_type's terms, in the order specs list them."""
ABSENT = {"position_biased_input": "true", "share_att_key": "false", "pos_att_type": "no terms"}
"""What transformers' DeBERTa-v2 makes of these fields where config.json leaves them out:
DebertaV2Config's defaults, and for share_att_key (no field of the class) the model's
``getattr(config, "share_att_key", False)``: position projections of each layer's own."""


@register
class DebertaV2(MaskedLM):
    model_type = "deberta-v2"
    title = "DeBERTa-v2"
    architectures = {"DebertaV2Model": "", "DebertaV2ForMaskedLM": "deberta."}
    export_architecture = "DebertaV2Model"
    masked_lm = "DebertaV2ForMaskedLM"
    heads = ("cls.", "lm_predictions.", "mask_predictions.")
    head_names = ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", "cls.predictions.bias")
    tied_output = "cls.predictions.decoder.*"
    special_tokens = {"bos_id": ("[CLS]", 1), "eos_id": ("[SEP]", 2), "unk_id": ("[UNK]", 3),
                      "mask_id": ("[MASK]", 128000)}
    """Where DeBERTa-v3's vocabulary puts them."""
    mapped = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
              "type_vocab_size", "layer_norm_eps", "pad_token_id", "relative_attention", "max_relative_positions",
              "position_biased_input", "pos_att_type", "position_buckets", "norm_rel_ebd", "share_att_key", "legacy",
              "embedding_size", "attention_head_size")
    required = MaskedLM.required | {"conv_kernel_size": (0,)}
    task_heads = Pooled(dense="pooler.dense", activation="gelu", configured=True, base_pooler=False)
    free = MaskedLM.free + ("vocab.bos_id", "vocab.eos_id")
    ignored = {**dict.fromkeys(("bos_token_id", "eos_token_id"), "DeBERTa's computation reads no bos/eos id"),
               **dict.fromkeys(("pooler_hidden_size", "pooler_hidden_act"), "read by the ContextPooler of "
                               "DebertaV2ForSequenceClassification only (task_heads.py)"),
               "pooler_dropout": "dropout of the ContextPooler's input: training only",
               **dict.fromkeys(("conv_groups", "conv_act"), "read only with conv_kernel_size, which tfspec refuses")}

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        mlm = self.reads_head(source)
        legacy = flag(c, "legacy", where, True)  # read with or without the masked-LM head
        if mlm and not legacy:
            raise TfspecError(f"{where}: legacy: false is not supported with {source.architecture}; tfspec imports its "
                              "masked-LM head as legacy: true stores it (cls.predictions)")
        d_model, heads = number(c, "hidden_size", where, default=1536), number(c, "num_attention_heads", where,
                                                                                default=24)
        if number(c, "embedding_size", where, default=d_model) != d_model:
            raise TfspecError(f"{where}: embedding_size: {_show(c['embedding_size'])} is not supported; tfspec imports "
                              f"{self.title} with embeddings as wide as hidden_size ({d_model})")
        d_k = number(c, "attention_head_size", where, default=d_model // heads)
        terms = self._terms(c, where)
        layer = {"kind": "self_attention"} | ({"scale": (d_k * (1 + len(terms))) ** -0.5} if terms else {})
        segments = number(c, "type_vocab_size", where, default=0)
        act = activation(c, "hidden_act", where, "gelu")
        return {"family": self.family, "vocab": self._vocab(source), "d_model": d_model, "heads": heads,
                "d_k": d_k, "d_v": d_k, "d_ff": number(c, "intermediate_size", where, default=6144), "activation": act,
                "dropout": number(c, "hidden_dropout_prob", where, float, 0.1),
                "attention_dropout": number(c, "attention_probs_dropout_prob", where, float, 0.1),
                "label_smoothing": 0.0, "positional": self._positional(c, where, terms), "segments": segments,
                "embed_norm": True, "embed_scale": False, "norm": "post", "final_norm": False,
                "norm_eps": number(c, "layer_norm_eps", where, float, 1e-7),
                "head_transform": mlm, "output_bias": mlm, "tie_embeddings": "output",
                "encoder": {"layers": number(c, "num_hidden_layers", where, default=24), "block": [layer, "ffn"]}}

    def _terms(self, c: dict, where: str) -> list[str]:
        """pos_att_type as a list ("p2c|c2p" in older files), in ``TERMS`` order."""
        value = c.get("pos_att_type")
        listed = [t.strip() for t in value.lower().split("|")] if isinstance(value, str) else value or []
        if not isinstance(listed, list) or any(term not in TERMS for term in listed):
            raise TfspecError(f"{where}: pos_att_type: {_show(value)} is not supported; tfspec computes a list of "
                              f"{' and '.join(TERMS)}")
        return [term for term in TERMS if term in listed]

    def _positional(self, c: dict, where: str, terms: list[str]) -> dict:
        max_len = number(c, "max_position_embeddings", where, default=512)
        top = number(c, "max_relative_positions", where, default=-1)  # read whether relative or not
        relative = flag(c, "relative_attention", where)
        biased = flag(c, "position_biased_input", where, True)
        if not relative:
            return {"kind": "learned", "max_len": max_len} if biased else {"kind": "none", "max_len": max_len}
        refusals = {"position_biased_input": biased, "share_att_key": not flag(c, "share_att_key", where),
                    "pos_att_type": not terms}
        for key, refused in refusals.items():
            if refused:
                said = f"{key}: {_show(c[key])}" if key in c else f"{key} is absent, which transformers reads as " \
                                                                   f"{ABSENT[key]}, and that"
                raise TfspecError(f"{where}: {said} is not supported with relative_attention; tfspec imports "
                                  f"{self.title} with position_biased_input false, share_att_key true and "
                                  "pos_att_type naming c2p or p2c")
        buckets = number(c, "position_buckets", where, default=-1)
        if buckets < 4:
            raise TfspecError(f"{where}: position_buckets: {_show(buckets)} is not supported; tfspec imports "
                              f"{self.title}'s relative attention with log buckets (position_buckets 4 or more)")
        norm = c.get("norm_rel_ebd", "none")
        if not isinstance(norm, str) or {part.strip() for part in norm.lower().split("|")} - {"none", "layer_norm"}:
            raise TfspecError(f"{where}: norm_rel_ebd: {_show(norm)} is not supported; tfspec computes none or "
                              "layer_norm")
        return {"kind": "disentangled", "max_len": max_len, "buckets": buckets, "max_distance": top if top > 0
                else max_len, "terms": terms, "table_norm": "layer_norm" in norm.lower()}

    default_vocab: ClassVar[int] = 128100
    """The configuration class's default vocab_size (DeBERTa-v3's; v1's is its own)."""

    def _vocab(self, source: Source) -> dict:
        """pad from the config; the others as ``special_ids`` finds them (DeBERTa-v3's places)."""
        size = number(source.config, "vocab_size", source.where, default=self.default_vocab)
        pad = number(source.config, "pad_token_id", source.where, default=0)
        return {"size": size, **self.special_ids(source, size, {"pad_id": pad})}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = embedding_rules(spec)
        for i in range(spec.encoder.num_layers):
            ours, theirs = f"encoder.layers.{i}.", f"encoder.layer.{i}."
            qkv = [f"{theirs}attention.self.{part}_proj" for part in ("query", "key", "value")]
            rules += [Rule(ours + "self_attn.w_qkv", tuple(f"{p}.weight" for p in qkv), Concat()),
                      Rule(ours + "self_attn.b_qkv", tuple(f"{p}.bias" for p in qkv), Concat()),
                      *block_rules(ours, theirs)]
        if spec.positional.kind == "disentangled":  # the stack's table, held by its first attention
            from tfspec.layers.disentangled import NORM, NORM_BIAS, TABLE  # here: the layers import the schema

            owner = "encoder.layers.0.self_attn."
            rules.append(Rule(owner + TABLE, ("encoder.rel_embeddings.weight",)))
            if spec.positional.table_norm:
                rules += [Rule(owner + NORM, ("encoder.LayerNorm.weight",)),
                          Rule(owner + NORM_BIAS, ("encoder.LayerNorm.bias",))]
        return rules + self.head_rules(spec)  # under cls.predictions (legacy, as export writes it)

    def dropped(self, architecture: str) -> dict[str, str]:
        dropped = super().dropped(architecture) | {
            "embeddings.position_ids": "a buffer of position indices, not a weight",
            "mask_predictions.*": "the replaced-token-detection head, which transformers does not load"}
        if architecture == self.export_architecture:
            return dropped
        return dropped | {"lm_predictions.*": "the head legacy: false reads; with legacy true transformers reads "
                                              "cls.predictions"}

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if spec.positional.kind not in ("disentangled", "learned", "none"):
            return f"{self.title}'s positions are disentangled or learned, not {spec.positional.kind}"
        return None

    def config(self, spec) -> dict:
        attention, ffn = repeated_layer(spec, "encoder")
        p, relative = spec.positional, spec.positional.kind == "disentangled"
        terms = round(attention.score_scale(attention.d_k) ** -2 / attention.d_k) - 1
        config = {"architectures": [self.architecture_for(spec)], "model_type": self.model_type,
                  "vocab_size": spec.vocab.size, "hidden_size": spec.d_model, "num_hidden_layers": spec.encoder.num_layers,
                  "num_attention_heads": attention.heads, "intermediate_size": ffn.d_ff,
                  "hidden_act": ACTIVATION_NAMES[ffn.activation], "hidden_dropout_prob": spec.dropout,
                  "attention_probs_dropout_prob": spec.attention_dropout, "max_position_embeddings": p.max_len,
                  "type_vocab_size": spec.segments, "layer_norm_eps": spec.norm_eps, "pad_token_id": spec.vocab.pad_id,
                  "relative_attention": relative, "position_biased_input": p.kind == "learned",
                  "pos_att_type": list(p.terms) if relative else list(TERMS[:max(0, terms)]), "legacy": True,
                  "tie_word_embeddings": True}
        if attention.d_k * attention.heads != spec.d_model:
            config["attention_head_size"] = attention.d_k
        if relative:
            config |= {"position_buckets": p.buckets, "max_relative_positions": p.max_distance,
                       "norm_rel_ebd": "layer_norm" if p.table_norm else "none", "share_att_key": True}
        return config


def embedding_rules(spec) -> list[Rule]:
    """The embeddings' tensors as both DeBERTa versions store them."""
    rules = [Rule("encoder.embed.weight", ("embeddings.word_embeddings.weight",)),
             *norm_rules("encoder.embed_norm", "embeddings.LayerNorm")]
    if spec.positional.kind == "learned":
        rules.append(Rule("encoder.pos.weight", ("embeddings.position_embeddings.weight",)))
    if spec.segments:
        rules.append(Rule("encoder.segment.weight", ("embeddings.token_type_embeddings.weight",)))
    return rules


def block_rules(ours: str, theirs: str) -> list[Rule]:
    """A layer's tensors after its attention's projections (W^O, the norms, the feed-forward
    network), the same in both DeBERTa versions."""
    return [*_dense(ours + "self_attn.w_o", ours + "self_attn.b_o", theirs + "attention.output.dense"),
            *norm_rules(ours + "self_attn_norm", theirs + "attention.output.LayerNorm"),
            *_dense(ours + "ffn.w_1", ours + "ffn.b_1", theirs + "intermediate.dense"),
            *_dense(ours + "ffn.w_2", ours + "ffn.b_2", theirs + "output.dense"),
            *norm_rules(ours + "ffn_norm", theirs + "output.LayerNorm")]
