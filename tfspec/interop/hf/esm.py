"""ESM (``model_type: esm``): transformers' EsmModel, EsmForMaskedLM, EsmForSequenceClassification
and EsmForTokenClassification as tfspec specs: the architecture of Meta's protein language models
(facebook/esm2_t6_8M_UR50D, esm2_t12_35M_UR50D, esm2_t30_150M_UR50D, esm2_t33_650M_UR50D,
esm2_t36_3B_UR50D, esm2_t48_15B_UR50D; esm1b_t33_650M_UR50S, esm1v_t33_650M_UR90S_1..5; Lin et al.
2023, Rives et al. 2021) and of models fine-tuned from them. Every one of those published files
sets ``token_dropout: true``, which tfspec does not compute (refused, below): they import only
once a configuration says false, which is then another model (their embeddings unscaled).

A pre-norm BERT (fairseq's ESM): query, key and value matrices stacked into ``w_qkv`` as BERT's;
a LayerNorm before each sub-layer (``attention.LayerNorm``, the layer's ``LayerNorm``) and one
after the last layer (``encoder.emb_layer_norm_after``: ``final_norm``), which the pooler and the
heads read; exact GELU in every feed-forward layer and in the masked-LM head whatever
``hidden_act`` says (transformers' ESM never reads it: accepted as gelu only, as published); no
token type embeddings and no embedding scale. Positions as ``position_embedding_type`` says:

- ``rotary`` (ESM-2): queries and keys rotated in halves, base ``rope_theta``, over each head's
  features (transformers scales the queries by 1/sqrt(head_dim) before rotating them, which
  rotates to the same scores); the ``inv_freq`` buffer is left out, tfspec computes it;
- ``absolute`` (ESM-1b, ESM-1v, EsmConfig's default): a learned table whose rows start at
  pad_token_id + 1 (RoBERTa's ``positional.offset``, fairseq's padding rows), so
  ``max_len`` is max_position_embeddings - pad_token_id - 1.

``emb_layer_norm_before`` puts a LayerNorm on the embeddings (``embeddings.layer_norm``,
``embed_norm``: ESM-1b's). EsmModel has BERT's pooler (dense + tanh of the first position);
EsmForMaskedLM a RoBERTa-like head (``lm_head``: dense, exact GELU, LayerNorm, the output tied
to the token embedding unless ``tie_word_embeddings`` is false, with a bias);
EsmForSequenceClassification reads the first position through ``classifier.dense``, tanh and
``classifier.out_proj``; EsmForTokenClassification is ``classifier`` at every position.

Refused by name:

- ``token_dropout: true`` (every published ESM-2, ESM-1b and ESM-1v config.json): transformers
  then zeroes the embeddings of ``mask_token_id`` and scales each row's embeddings by
  (1 - 0.15 * 0.8) / (1 - the share of mask tokens among the row's real tokens), a factor of
  the input tfspec's embeddings do not compute (a constant ``embed_multiplier`` matches it only
  for inputs without mask tokens);
- ``position_embedding_type`` other than absolute or rotary (transformers 5 gives such a
  configuration no positions at all), and absolute with no pad_token_id (transformers then
  cannot place the positions);
- ``is_folding_model`` (ESMFold), ``is_decoder``, and a question-answering class (transformers
  has no EsmForQuestionAnswering);
- the contact-prediction head every class holds (``contact_head``, a logistic regression over
  every layer's attention maps, read only by ``predict_contacts``): left out with a note and
  counted as a difference from transformers' count; a checkpoint ``export --format hf`` writes
  has none, so transformers initialises one at random there.

``vocab_size`` has no default in EsmConfig (null: refused, as transformers cannot build the
model); pad, mask, eos and bos come from the config, else from vocab.txt (<pad>, <mask>, <eos>,
<cls>), else ESM-2's places (1, 32, 2, 0). Defaults are EsmConfig's.
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf.bert import Bert
from tfspec.interop.hf.family import Family, Rule, Source, _show, flag, norm_rules, number, register
from tfspec.interop.hf.layouts import Concat
from tfspec.interop.hf.task_heads import Pooled, TaskHeads

POSITIONS = ("absolute", "rotary")
"""The position_embedding_type values transformers' ESM computes positions for."""
SPECIAL_TOKENS = {"pad_id": ("pad_token_id", "<pad>", 1), "mask_id": ("mask_token_id", "<mask>", 32),
                  "eos_id": ("eos_token_id", "<eos>", 2), "bos_id": ("bos_token_id", "<cls>", 0),
                  "unk_id": (None, "<unk>", 3)}
"""Spec id -> the config field that gives it (None: none does), its token in vocab.txt and where
ESM-2's vocabulary puts it."""
CONTACT_HEAD = ("the contact-prediction head (contact_head: a logistic regression over every layer's attention "
                "maps, which only predict_contacts reads), which tfspec does not import")
INV_FREQ = ("the rotary frequencies, a buffer tfspec computes from rope_theta (older checkpoints hold one a layer, "
            "and transformers 5 writes it under that pattern's own name)")
MASK_TRAINED = 0.15 * 0.8
"""The share of tokens ESM's training replaced by <mask> (transformers' mask_ratio_train)."""


class EsmTaskHeads(TaskHeads):
    """ESM's task classes: sequence and token classification; transformers has no
    EsmForQuestionAnswering (the suffix ``with_task_heads`` lists for every family)."""

    def spec_data(self, source: Source) -> dict:
        if source.architecture.endswith("ForQuestionAnswering"):
            raise TfspecError(f"{source.where}: architecture {source.architecture!r} is not supported: transformers "
                              f"has no such class; tfspec imports {self.title}'s sequence and token classification")
        return super().spec_data(source)

    def structure(self, spec) -> str | None:
        if spec.head is not None and spec.head.kind == "answer_span":
            return f"transformers has no {self.task_names}ForQuestionAnswering: {self.title} has no answer_span head"
        return super().structure(spec)


@register
class Esm(Family):
    model_type = "esm"
    family = "encoder-only"
    title = "ESM"
    architectures = {"EsmModel": "", "EsmForMaskedLM": "esm."}
    export_architecture = "EsmModel"
    masked_lm = "EsmForMaskedLM"
    heads = ("lm_head.",)
    mapped = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings", "rope_theta",
              "layer_norm_eps", "position_embedding_type", "emb_layer_norm_before", "token_dropout", "pad_token_id",
              "mask_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings")
    required = {"is_folding_model": (False, None), "is_decoder": (False, None), "hidden_act": ("gelu",)}
    """ESMFold and a decoder are other models; ``hidden_act`` is a field of the published files
    (esm2_t6_8M_UR50D's "gelu") that transformers' ESM never reads: it applies exact GELU, so
    only the value that says so is accepted."""
    ignored = {**dict.fromkeys(("esmfold_config", "vocab_list"), "read only by ESMFold (is_folding_model: true, "
                                                                 "refused); transformers drops them otherwise")}
    free = Family.free + ("vocab.bos_id", "vocab.eos_id")
    task_heads = Pooled(classifier="classifier.out_proj", dense="classifier.dense")
    task_class = EsmTaskHeads

    def spec_data(self, source: Source) -> dict:
        """Every field read (and its type checked) before any is judged: EsmConfig's defaults
        alone (no vocab_size, absolute positions without a pad) are refused, and a field of the
        wrong type is still named first."""
        c, where = source.config, source.where
        mlm = self.architectures[source.architecture] != ""
        size = number(c, "vocab_size", where, nullable=True)
        d_model = number(c, "hidden_size", where, default=768)
        heads = number(c, "num_attention_heads", where, default=12)
        layers = number(c, "num_hidden_layers", where, default=12)
        d_ff = number(c, "intermediate_size", where, default=3072)
        dropout = number(c, "hidden_dropout_prob", where, float, 0.1)
        attention_dropout = number(c, "attention_probs_dropout_prob", where, float, 0.1)
        rows = number(c, "max_position_embeddings", where, default=1026)
        theta = number(c, "rope_theta", where, float, 10000.0)
        eps = number(c, "layer_norm_eps", where, float, 1e-12)
        given = {key: number(c, field, where, nullable=True) for key, (field, _, _) in SPECIAL_TOKENS.items()
                 if field is not None and field != "eos_token_id"}
        given["eos_id"] = self._eos(c, where)
        embed_norm, token_dropout = self._switch(c, "emb_layer_norm_before", where), self._switch(c, "token_dropout",
                                                                                                  where)
        tied = flag(c, "tie_word_embeddings", where, True)
        kind = c.get("position_embedding_type", "absolute")
        if token_dropout:
            raise TfspecError(f"{where}: token_dropout: true is not supported: transformers' ESM then zeroes the "
                              f"embeddings of mask_token_id and scales each row's by (1 - {MASK_TRAINED:g}) / (1 - the "
                              "share of mask tokens among its real tokens), which tfspec's embeddings do not compute; "
                              "tfspec imports ESM with token_dropout false")
        if kind not in POSITIONS:
            raise TfspecError(f"{where}: position_embedding_type: {_show(kind)} is not supported; tfspec computes "
                              f"{' or '.join(POSITIONS)} (transformers' ESM gives any other value no positions)")
        if size is None:
            raise TfspecError(f"{where}: vocab_size must be an integer, got null (EsmConfig has no default, and "
                              "transformers cannot build the model without one; ESM-2's vocabulary has 33 tokens)")
        vocab = {"size": size, **self._special_ids(source, size, given)}
        return {"family": self.family, "vocab": vocab, "d_model": d_model, "heads": heads, "d_ff": d_ff,
                "activation": "gelu", "dropout": dropout, "attention_dropout": attention_dropout,
                "label_smoothing": 0.0, "positional": self._positional(kind, rows, theta, given["pad_id"], where),
                "segments": 0, "embed_norm": embed_norm, "embed_scale": False,
                "pooler": not mlm and (source.names is None or "pooler.dense.weight" in source.names),
                "head_transform": mlm, "output_bias": mlm, "norm": "pre", "norm_eps": eps, "final_norm": True,
                "tie_embeddings": "output" if tied or not mlm else "none", "bias": True,
                "encoder": {"layers": layers, "block": ["self_attention", "ffn"]}}

    def _switch(self, c: dict, key: str, where: str) -> bool:
        """A switch EsmConfig types ``bool | None``: null is off, as transformers tests its truth."""
        return False if c.get(key) is None else flag(c, key, where)

    def _eos(self, c: dict, where: str) -> int | None:
        """eos_token_id: one id (or a list whose first is the id), null, or EsmConfig's 2."""
        value = c.get("eos_token_id", 2)
        value = value[0] if isinstance(value, list) and value else value
        return number({"eos_token_id": value}, "eos_token_id", where, nullable=True)

    def _positional(self, kind: str, rows: int, theta: float, pad: int | None, where: str) -> dict:
        if kind == "rotary":
            if theta <= 1:
                raise TfspecError(f"{where}: rope_theta must exceed 1, got {theta}")
            return {"kind": "rotary", "base": theta, "max_len": rows}
        if pad is None:
            raise TfspecError(f"{where}: pad_token_id: null is not supported with position_embedding_type "
                              "\"absolute\": transformers' ESM places positions from pad_token_id + 1 and cannot "
                              "without one")
        if rows <= pad + 1:
            raise TfspecError(f"{where}: max_position_embeddings ({rows}) must exceed pad_token_id + 1 ({pad + 1}): "
                              f"{self.title}'s learned positions start at row pad_token_id + 1")
        return {"kind": "learned", "max_len": rows - pad - 1, "offset": pad + 1}

    def _special_ids(self, source: Source, size: int, given: dict) -> dict:
        """Each id from its config field, else from vocab.txt, else ESM-2's place where that
        fits the vocabulary, else the first id none of these holds (only tokenizers and training
        read them, but pad masks and places positions)."""
        ids = {key: value for key, value in given.items() if value is not None}
        for key, (_, token, _) in SPECIAL_TOKENS.items():
            if key not in ids and token in source.vocabulary:
                ids[key] = source.vocabulary[token]
        for key, (_, _, place) in SPECIAL_TOKENS.items():
            if key not in ids:
                held = set(ids.values())
                spare = next((i for i in range(size) if i not in held), 0)  # ids may coincide (Vocab)
                ids[key] = place if place < size and place not in held else spare
        return ids

    def rename(self, name: str) -> str:
        # transformers 5 writes ESM's LayerNorm parameters as gamma and beta (it reverses, on
        # saving, the renaming it applies to ESM on loading); the published files say weight and bias
        if "LayerNorm." in name:
            return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        return name

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("encoder.embed.weight", ("embeddings.word_embeddings.weight",)),
                 *norm_rules("encoder.norm", "encoder.emb_layer_norm_after")]
        if spec.positional.kind == "learned":
            rules.append(Rule("encoder.pos.weight", ("embeddings.position_embeddings.weight",)))
        if spec.embed_norm:
            rules += norm_rules("encoder.embed_norm", "embeddings.layer_norm")
        for i in range(spec.encoder.num_layers):
            ours, theirs = f"encoder.layers.{i}.", f"encoder.layer.{i}."
            qkv = [f"{theirs}attention.self.{part}" for part in ("query", "key", "value")]
            rules += [Rule(ours + "self_attn.w_qkv", tuple(f"{p}.weight" for p in qkv), Concat()),
                      Rule(ours + "self_attn.b_qkv", tuple(f"{p}.bias" for p in qkv), Concat()),
                      *_dense(ours + "self_attn.w_o", ours + "self_attn.b_o", theirs + "attention.output.dense"),
                      *norm_rules(ours + "self_attn_norm", theirs + "attention.LayerNorm"),
                      *_dense(ours + "ffn.w_1", ours + "ffn.b_1", theirs + "intermediate.dense"),
                      *_dense(ours + "ffn.w_2", ours + "ffn.b_2", theirs + "output.dense"),
                      *norm_rules(ours + "ffn_norm", theirs + "LayerNorm")]
        if spec.pooler:
            rules += _dense("encoder.pooler.w_pool", "encoder.pooler.b_pool", "pooler.dense")
        if spec.head_transform:
            rules += [*_dense("head.dense.weight", "head.dense.bias", "lm_head.dense"),
                      *norm_rules("head.norm", "lm_head.layer_norm"), Rule("output.bias", ("lm_head.bias",))]
            if not spec.ties_output:
                rules.append(Rule("output.weight", ("lm_head.decoder.weight",)))
        return rules

    def dropped(self, architecture: str) -> dict[str, str]:
        dropped = {"contact_head.*": CONTACT_HEAD,
                   "embeddings.position_ids": "a buffer of position indices, not a weight",
                   **dict.fromkeys(("rotary_embeddings.inv_freq",
                                    "encoder.layer.*.attention.self.rotary_embeddings.inv_freq"), INV_FREQ),
                   "embeddings.position_embeddings.weight": "a position table, which transformers' ESM ignores with "
                                                            "rotary positions"}
        if architecture == self.export_architecture:
            return dropped | {"lm_head.*": f"the masked-LM head, not part of {architecture}"}
        return dropped | {"lm_head.decoder.weight": "the output projection, tied to the token embedding",
                          "pooler.*": f"{architecture} has no pooler"}

    def count_differences(self, spec, architecture: str) -> list[tuple[int, str]]:
        """Every class holds the contact head: a Linear(layers x heads, 1)."""
        heads = spec.plan("encoder")[0].attention.heads
        return [(spec.encoder.num_layers * heads + 1, "contact-prediction head (contact_head) it holds, which "
                                                       "tfspec does not import")]

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if spec.segments:
            return f"{self.title} has no segment (token type) embeddings: set segments: 0"
        if spec.positional.kind not in ("rotary", "learned"):
            return f"{self.title} has rotary or learned positions, not {spec.positional.kind}"
        if spec.embed_projection is not None:
            return f"{self.title}'s embeddings are as wide as its layers: drop embed_projection"
        if spec.pooler and spec.head_transform:
            return f"transformers' {self.masked_lm} has no pooler: drop pooler or head_transform"
        if spec.head is None and not (spec.pooler or spec.head_transform):
            return (f"transformers' {self.export_architecture} always has a pooler: set pooler: true (or "
                    f"head_transform for {self.masked_lm})")
        return None

    architecture_for = Bert.architecture_for  # the masked LM with a head transform, else the pooled model
    outputs = Bert.outputs

    def config(self, spec) -> dict:
        plan, v, positions = spec.plan("encoder"), spec.vocab, spec.positional
        attention, ffn = plan[0].attention, plan[0].ffn
        rotary = positions.kind == "rotary"
        return {"architectures": [self.architecture_for(spec)], "model_type": self.model_type,
                "vocab_size": v.size, "hidden_size": spec.d_model, "num_hidden_layers": len(plan),
                "num_attention_heads": attention.heads, "intermediate_size": ffn.d_ff,
                "hidden_dropout_prob": spec.dropout, "attention_probs_dropout_prob": spec.attention_dropout,
                "max_position_embeddings": positions.max_len + (0 if rotary else positions.offset),
                "position_embedding_type": "rotary" if rotary else "absolute",
                **({"rope_theta": positions.base} if rotary else {}),
                "layer_norm_eps": spec.norm_eps, "emb_layer_norm_before": spec.embed_norm, "token_dropout": False,
                "pad_token_id": v.pad_id, "mask_token_id": v.mask_id, "bos_token_id": v.bos_id,
                "eos_token_id": v.eos_id, "tie_word_embeddings": spec.ties_output or not spec.head_transform,
                "is_folding_model": False}


def _dense(weight: str, bias: str, theirs: str) -> list[Rule]:
    return [Rule(weight, (f"{theirs}.weight",)), Rule(bias, (f"{theirs}.bias",))]
