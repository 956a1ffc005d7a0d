"""XLM (``model_type: xlm``): transformers' XLMModel and XLMWithLMHeadModel as tfspec specs
(FacebookAI/xlm-mlm-en-2048, xlm-mlm-17-1280 and xlm-mlm-100-1280; Lample & Conneau 2019),
with XLMForTokenClassification and XLMForQuestionAnsweringSimple on top.

A post-norm encoder (``norm: post``, no final norm) over token embeddings plus learned
positions from row 0, normed (``layer_norm_emb``: ``embed_norm``) and unscaled; feed-forward
layers 4 x emb_dim wide (fixed in transformers' code) with exact GELU, or ReLU where
``gelu_activation`` is false. XLMWithLMHeadModel's ``pred_layer.proj`` is the token projection
with a bias, tied to the token embedding unless ``tie_word_embeddings`` is false; XLMModel
gives the last hidden states. Defaults are XLMConfig's (xlm-mlm-en-2048's shape).

What transformers computes for ``model(input_ids, attention_mask)`` is imported, exactly:

- ``sinusoidal_embeddings`` only initialises the position table, which the checkpoint stores
  and transformers reads back (as DistilBERT's ``sinusoidal_pos_embds``): a learned table either way.
- ``langs`` and ``token_type_ids`` are optional inputs that add language embeddings and rows of
  the token table when passed; a model run without them computes without them. Language
  embeddings exist where ``n_langs`` > 1 and ``use_lang_emb`` (xlm-mlm-enfr-1024, the
  xnli15 and clm models): those models are run with ``langs`` (transformers' multilingual guide),
  tfspec has no such input, so they are refused by name rather than imported without the
  table they were trained to read. xlm-mlm-17-1280 and xlm-mlm-100-1280 (``use_lang_emb``
  false) and monolingual models (``n_langs`` 1) import.
- transformers zeroes the hidden states of padded positions after every layer; padded
  positions are keys attention never reads, so the real tokens' outputs are unchanged.

Refused by name: ``causal`` true (a causal XLM is a decoder whose XLMWithLMHeadModel generates
by appending a mask token and reading its prediction, not as tfspec's decoders decode; the
published ones, xlm-clm-enfr-1024 and xlm-clm-ende-1024, carry language embeddings too),
adaptive softmax (``asm`` true), ``is_encoder`` false (transformers raises), a sequence class
whose ``summary_*`` settings are not XLMConfig's (its classifier reads the first position itself,
projected to the labels: the head's ``pooling: first`` without a pooler or transform) and
XLMForQuestionAnswering (the SQuAD head: start, end and answer-class layers and a beam search
over spans). Older config.json files name fields as the original XLM code did
(``n_words``, ``pad_index``, ...): read as transformers' ``attribute_map`` reads them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from tfspec.errors import TfspecError
from tfspec.interop.hf.bert import _dense
from tfspec.interop.hf.family import (Family, Rule, Source, _show, check_config, flag, norm_rules, number, register,
                                      repeated_layer)
from tfspec.interop.hf.layouts import Concat
from tfspec.interop.hf.task_heads import Pooled, TaskHeads

ATTRIBUTE_MAP = {"hidden_size": "emb_dim", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers",
                 "n_words": "vocab_size", "bos_index": "bos_token_id", "eos_index": "eos_token_id",
                 "pad_index": "pad_token_id"}
"""XLMConfig's (and FlaubertConfig's) ``attribute_map``: old name -> the field it sets."""
TRAINING = ("amp", "fp16", "bptt", "clip_grad_norm", "encoder_only", "group_by_size", "lg_sampling_factor", "lgs",
            "max_batch_size", "max_vocab", "min_count", "mlm_steps", "clm_steps", "sample_alpha", "tokens_per_batch",
            "word_blank", "word_dropout", "word_keep", "word_mask", "word_mask_keep_rand", "word_pred", "word_rand",
            "word_shuffle", "context_size")
"""Settings of the original XLM training script (facebookresearch/XLM's train.py) that the
Flaubert releases saved into config.json; transformers reads none of them."""


def folded(config: dict) -> dict:
    """``config`` with each old name's value under the field it sets (transformers' reading),
    where the field itself is absent; both present, ``Family.aliases`` checks they agree."""
    return {new: config[old] for old, new in ATTRIBUTE_MAP.items() if old in config and new not in config} | config


SUMMARY = {"summary_type": "first", "summary_use_proj": True, "summary_activation": None,
           "summary_proj_to_labels": True}
"""XLMConfig's sequence_summary settings: the only ones tfspec's sequence head computes."""


class XLMTaskHeads(TaskHeads):
    """XLM's task classes: token classification (``classifier``) and the simple question-answering
    class (``qa_outputs``, named *ForQuestionAnsweringSimple), each a linear layer on every
    position; the sequence class and the SQuAD class are refused by name."""

    @property
    def simple_answer(self) -> str:
        return f"{self.task_names}ForQuestionAnsweringSimple"

    def _task(self, architecture: str) -> str:
        """The class name ``task_heads`` reads: the simple question-answering class as *ForQuestionAnswering."""
        return f"{self.task_names}ForQuestionAnswering" if architecture == self.simple_answer else architecture

    def spec_data(self, source: Source) -> dict:
        names, architecture = self.task_names, source.architecture
        if architecture == f"{names}ForSequenceClassification":
            self._summary(source)
        if architecture == f"{names}ForQuestionAnswering":
            raise TfspecError(f"{source.where}: architecture {architecture!r} is not supported: its SQuAD head "
                              "(start, end and answer-class layers, a beam search over spans) is not tfspec's "
                              f"answer_span head; {self.simple_answer} (qa_outputs) imports")
        return super().spec_data(replace(source, architecture=self._task(architecture)))

    def _summary(self, source: Source) -> None:
        """The sequence class's ``sequence_summary`` as tfspec's head computes it: the first
        position, projected straight to the labels; another summary is refused by its field."""
        c, where = source.config, source.where
        for key, value in SUMMARY.items():
            if c.get(key, value) != value:
                raise TfspecError(f"{where}: {key}: {_show(c[key])} is not supported; tfspec imports "
                                  f"{self.task_names}ForSequenceClassification's sequence_summary as {key}: "
                                  f"{_show(value)} (the first position, projected to the labels)")

    def dropped(self, architecture: str) -> dict[str, str]:
        return super().dropped(self._task(architecture))

    def outputs(self, architecture: str) -> dict[str, str]:
        return super().outputs(self._task(architecture))

    def structure(self, spec) -> str | None:
        head = spec.head
        if head is not None and head.kind == "sequence_classification" and (
                head.resolved_pooling(spec) != "first" or head.transform is not None):
            return (f"transformers' {self.task_names}ForSequenceClassification feeds the first position itself "
                    "to its classifier: set pooling: first and no head transform")
        return super().structure(spec)

    def architecture_for(self, spec) -> str:
        if spec.head is not None and spec.head.kind == "answer_span":
            return self.simple_answer
        return super().architecture_for(spec)


@register
class XLM(Family):
    model_type = "xlm"
    family = "encoder-only"
    title = "XLM"
    architectures = {"XLMModel": "", "XLMWithLMHeadModel": "transformer.",
                     "XLMForQuestionAnsweringSimple": "transformer."}
    export_architecture = "XLMModel"
    masked_lm = "XLMWithLMHeadModel"
    """The architecture export writes for a spec with the token projection's bias."""
    heads = ("pred_layer.",)
    task_heads = Pooled(classifier="sequence_summary.summary", base_pooler=False, first_only=True)
    task_class = XLMTaskHeads
    export_rank = 1  # XLMModel's specs are BertGeneration's (DistilBERT's at eps 1e-12): export writes XLM for the LM
    mapped = ("vocab_size", "emb_dim", "n_layers", "n_heads", "dropout", "attention_dropout", "gelu_activation",
              "sinusoidal_embeddings", "n_langs", "use_lang_emb", "max_position_embeddings", "layer_norm_eps",
              "tie_word_embeddings", "pad_token_id", "bos_token_id", "eos_token_id", "unk_index", "mask_index")
    required = {"causal": (False,), "asm": (False,), "is_encoder": (True,)}
    aliases = {**ATTRIBUTE_MAP, "share_inout_emb": "tie_word_embeddings"}
    ignored = {**dict.fromkeys(("embed_init_std", "init_std"), "initialisation of untrained weights"),
               **dict.fromkeys(("mask_token_id", "lang_id"), "generation settings: the token XLMWithLMHeadModel's "
                               "generate appends and the language it passes as langs"),
               **dict.fromkeys(("id2lang", "lang2id"), "the names of the languages, which only langs reads"),
               **dict.fromkeys(("start_n_top", "end_n_top"), "the beam of XLMForQuestionAnswering's SQuAD head, "
                               "which tfspec does not import"),
               **dict.fromkeys(("asm_cutoffs", "asm_div_value"), "read only with asm true (adaptive softmax), "
                               "which tfspec refuses"),
               **dict.fromkeys(TRAINING, "a setting of the original XLM training script; transformers reads none "
                               "of them")}
    free = Family.free + ("vocab.bos_id", "vocab.eos_id")
    defaults = {"tie_word_embeddings": True}
    """XLMConfig's, for ``share_inout_emb`` (the original code's name) to agree with where a file leaves it out."""
    widening: ClassVar[int] = 4
    """The feed-forward layers' width over emb_dim, fixed in transformers' TransformerFFN."""

    def check(self, config: dict, where: str) -> dict[str, str]:
        return check_config(self, folded(config), where)

    def spec_data(self, source: Source) -> dict:
        c, where = folded(source.config), source.where
        lm = source.architecture == self.masked_lm
        d, size = number(c, "emb_dim", where, default=2048), number(c, "vocab_size", where, default=30145)
        self._languages(c, where)
        flag(c, "sinusoidal_embeddings", where)  # initialises the stored table only: checked, not mapped
        tied = flag(c, "tie_word_embeddings", where, default=True)
        return {"family": self.family, "vocab": {"size": size, **self._special_ids(c, where)},
                "d_model": d, "heads": number(c, "n_heads", where, default=16), "d_ff": self.widening * d,
                "activation": "gelu" if flag(c, "gelu_activation", where, default=True) else "relu",
                "dropout": number(c, "dropout", where, float, 0.1),
                "attention_dropout": number(c, "attention_dropout", where, float, 0.1), "label_smoothing": 0.0,
                "positional": {"kind": "learned", "max_len": number(c, "max_position_embeddings", where, default=512)},
                "segments": 0, "embed_norm": True, "pooler": False, "head_transform": False, "output_bias": lm,
                "norm": "post", "norm_eps": number(c, "layer_norm_eps", where, float, 1e-12), "final_norm": False,
                "tie_embeddings": "output" if tied or not lm else "none", "embed_scale": False,
                "encoder": {"layers": number(c, "n_layers", where, default=12), "block": ["self_attention", "ffn"]}}

    def _languages(self, c: dict, where: str) -> None:
        """Refuse language embeddings: a model holding them is run with langs, which no spec takes."""
        languages, used = number(c, "n_langs", where, default=1), flag(c, "use_lang_emb", where, default=True)
        if languages < 1:
            raise TfspecError(f"{where}: n_langs must be at least 1, got {languages}")
        if languages > 1 and used:
            raise TfspecError(f"{where}: n_langs: {languages} with use_lang_emb true is not supported: such a model's "
                              "language embeddings are added to its tokens when langs is passed, as it is run, and "
                              f"a tfspec spec has no language input; tfspec imports {self.title} without language "
                              "embeddings (n_langs 1, or use_lang_emb false)")

    def _special_ids(self, c: dict, where: str) -> dict:
        """pad (it masks keys) from the config; bos, eos, unk and mask (only tokenizers and training
        read them) from the config too, at the original XLM vocabulary's places by default."""
        ids = {"pad_id": number(c, "pad_token_id", where, default=2)}
        for key, field, place, nullable in (("bos_id", "bos_token_id", 0, True), ("eos_id", "eos_token_id", 1, True),
                                            ("unk_id", "unk_index", 3, False), ("mask_id", "mask_index", 5, False)):
            value = number(c, field, where, default=place, nullable=nullable)
            ids[key] = place if value is None else value
        return ids

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("encoder.embed.weight", ("embeddings.weight",)),
                 Rule("encoder.pos.weight", ("position_embeddings.weight",)),
                 *norm_rules("encoder.embed_norm", "layer_norm_emb")]
        for i in range(spec.encoder.num_layers):
            ours, attention = f"encoder.layers.{i}.", f"attentions.{i}."
            qkv = [f"{attention}{part}_lin" for part in ("q", "k", "v")]
            rules += [Rule(ours + "self_attn.w_qkv", tuple(f"{p}.weight" for p in qkv), Concat()),
                      Rule(ours + "self_attn.b_qkv", tuple(f"{p}.bias" for p in qkv), Concat()),
                      *_dense(ours + "self_attn.w_o", ours + "self_attn.b_o", attention + "out_lin"),
                      *norm_rules(ours + "self_attn_norm", f"layer_norm1.{i}"),
                      *_dense(ours + "ffn.w_1", ours + "ffn.b_1", f"ffns.{i}.lin1"),
                      *_dense(ours + "ffn.w_2", ours + "ffn.b_2", f"ffns.{i}.lin2"),
                      *norm_rules(ours + "ffn_norm", f"layer_norm2.{i}")]
        if spec.output_bias:
            rules.append(Rule("output.bias", ("pred_layer.proj.bias",)))
        if not spec.ties_output:
            rules.append(Rule("output.weight", ("pred_layer.proj.weight",)))
        return rules

    def dropped(self, architecture: str) -> dict[str, str]:
        dropped = {"position_ids": "a buffer of position indices, not a weight"}
        if architecture == self.export_architecture:
            return dropped | {"pred_layer.*": f"the language-model head, not part of {architecture}"}
        return dropped | {"pred_layer.proj.weight": "the output projection, tied to the token embedding"}

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if spec.segments:
            return (f"{self.title} adds no segment embeddings (its token_type_ids, when passed, add rows of the token "
                    "table): set segments: 0")
        if spec.pooler or spec.head_transform:
            return f"transformers' {self.title} has no pooler and no head transform: drop pooler and head_transform"
        return None

    def architecture_for(self, spec) -> str:
        return self.masked_lm if spec.output_bias else self.export_architecture

    def outputs(self, architecture: str) -> dict[str, str]:
        return {"logits": "logits"} if architecture == self.masked_lm else {"memory": "last_hidden_state"}

    def config(self, spec) -> dict:
        v, (attention, _) = spec.vocab, repeated_layer(spec, "encoder")
        return {"architectures": [self.architecture_for(spec)], "model_type": self.model_type,
                "vocab_size": v.size, "emb_dim": spec.d_model, "n_layers": spec.encoder.num_layers,
                "n_heads": attention.heads, "dropout": spec.dropout, "attention_dropout": spec.attention_dropout,
                "gelu_activation": spec.activation == "gelu", "sinusoidal_embeddings": False, "causal": False,
                "asm": False, "n_langs": 1, "use_lang_emb": False, "max_position_embeddings": spec.positional.max_len,
                "layer_norm_eps": spec.norm_eps, "is_encoder": True, "tie_word_embeddings": spec.ties_output,
                "pad_token_id": v.pad_id, "bos_token_id": v.bos_id, "eos_token_id": v.eos_id,
                "unk_index": v.unk_id, "mask_index": v.unk_id if v.mask_id is None else v.mask_id}
