"""ModernBERT (``model_type: modernbert``): transformers' ModernBertModel and ModernBertForMaskedLM
as tfspec specs (answerdotai/ModernBERT-base and -large; Warner et al. 2024).

A pre-norm encoder written with the spec's existing fields:

- no position table: rotary positions in every layer, global layers rotating with the
  global base (160,000: the spec's ``positional``), local ones with the local base (10,000: the
  layer's own ``positions``), from ``rope_parameters`` per layer type (transformers 5) or the
  older ``global_rope_theta`` / ``local_rope_theta``;
- layers attend as ``layer_types`` says (older files: ``global_attn_every_n_layers``, a global
  layer first and every n-th after it): global layers to every token, local ones to the tokens
  at most local_attention // 2 away (bidirectional restricted attention, r = local_attention // 2):
  a stack of groups, written back as ``layer_types``;
- GeGLU feed-forward layers (``gated``, ``hidden_activation``) whose ``Wi`` holds W1 then W3;
  attention and MLP biases as attention_bias and mlp_bias say (none in the published models),
  LayerNorms with a bias only where ``norm_bias`` says (none published);
- a LayerNorm on the token embeddings (``embed_norm``), none before the first layer's attention
  (its ``attn_norm`` is an identity: that sub-layer's ``input_norm: false``), a final norm;
- ModernBertForMaskedLM's head: dense (a bias if ``classifier_bias``: ``biases.head``), the
  classifier activation, LayerNorm, then the decoder tied to the token embeddings with a bias
  if ``decoder_bias``;
- the task classes (*ForSequenceClassification, *ForTokenClassification, *ForQuestionAnswering):
  the same prediction head as the task head's ``transform`` (with ``norm``), then ``classifier``;
  the sequence class pools as ``classifier_pooling`` says (cls or mean, ``ModernBertTaskHeads``).

Refused by name: rope types other than default and a ``classifier_activation`` other than the
layers' (tfspec's head uses the spec's activation). Defaults are ModernBertConfig's.
"""

from __future__ import annotations

import json
from itertools import groupby

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import ACTIVATION_NAMES, Rule, Source, _show, activation, flag, number, register
from tfspec.interop.hf.layouts import Split
from tfspec.interop.hf.masked_lm import MaskedLM, dense_rules, norms
from tfspec.interop.hf.task_heads import Pooled, TaskHeads

LAYER_TYPES = ("sliding_attention", "full_attention")
"""transformers' names for a local layer and a global one."""
THETA = {"full_attention": ("global_rope_theta", 160_000.0), "sliding_attention": ("local_rope_theta", 10_000.0)}
"""Layer type -> the field older files give its rotary base in, and ModernBertConfig's default."""
POOLING = {"cls": "first", "mean": "mean"}
"""classifier_pooling -> the sequence head's ``pooling``: the first position, or the mean over
the unmasked ones (as ModernBertForSequenceClassification weighs by its attention mask)."""


class ModernBertTaskHeads(TaskHeads):
    """ModernBERT's task classes: its prediction head (dense with a bias if classifier_bias, the
    classifier_activation, the layers' LayerNorm) before the classifier of every class, at each
    position for tokens and spans; the sequence class first pools as classifier_pooling says."""

    def _reading(self, kind: str, c: dict, where: str) -> dict:
        act = c.get("classifier_activation", "gelu")
        transform = {"activation": "tanh" if act == "tanh" else activation(c, "classifier_activation", where, "gelu"),
                     "bias": flag(c, "classifier_bias", where), "norm": True}
        if kind != "sequence_classification":
            return {"transform": transform}
        pooling = c.get("classifier_pooling", "cls")
        if pooling not in POOLING:
            raise TfspecError(f"{where}: classifier_pooling: {_show(pooling)} is not supported; tfspec pools "
                              f"{' or '.join(POOLING)} as transformers' ModernBertForSequenceClassification does")
        return {"pooling": POOLING[pooling], "transform": transform}

    def structure(self, spec) -> str | None:
        head = spec.head
        if head is not None and head.kind != "ctc" and (head.transform is None or not head.transform.norm):
            return (f"{self.title}'s task classes read its prediction head: set head.transform with norm: true "
                    "(a dense layer, its activation, then the layers' norm)")
        return super().structure(spec)

    def config(self, spec) -> dict:
        config = super().config(spec)
        if spec.head is None:
            return config
        transform = spec.head.transform
        config |= {"classifier_activation": ACTIVATION_NAMES.get(transform.activation, transform.activation),
                   "classifier_bias": transform.bias}
        if spec.head.kind == "sequence_classification":
            config["classifier_pooling"] = {v: k for k, v in POOLING.items()}[spec.head.resolved_pooling(spec)]
        return config


@register
class ModernBert(MaskedLM):
    model_type = "modernbert"
    title = "ModernBERT"
    architectures = {"ModernBertForMaskedLM": "model.", "ModernBertModel": ""}
    export_architecture = "ModernBertModel"
    masked_lm = "ModernBertForMaskedLM"
    heads = ("head.", "decoder.")
    head_names = ("head.dense", "head.norm", "decoder.bias")
    tied_output = "decoder.weight"
    special_tokens = {"unk_id": ("[UNK]", 50280), "mask_id": ("[MASK]", 50284)}
    """Where ModernBERT-base's vocabulary puts them."""
    grouped = True
    task_heads = Pooled(dense="head.dense", norm="head.norm", answer="classifier", activation="gelu",
                        base_pooler=False)
    task_class = ModernBertTaskHeads
    mapped = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "hidden_activation", "max_position_embeddings", "norm_eps", "norm_bias", "pad_token_id", "bos_token_id",
              "eos_token_id", "attention_bias", "attention_dropout", "layer_types", "rope_parameters",
              "local_attention", "embedding_dropout", "mlp_bias", "mlp_dropout", "decoder_bias", "classifier_bias",
              "classifier_activation", "global_attn_every_n_layers", "global_rope_theta", "local_rope_theta",
              "classifier_pooling")
    required = MaskedLM.required | {"rope_scaling": (None,)}
    ignored = {**dict.fromkeys(("cls_token_id", "sep_token_id"), "tokenizer settings"),
               "deterministic_flash_attn": "how transformers runs the model (flash-attention kernels)",
               "reference_compile": "how transformers runs the model (torch.compile)",
               "repad_logits_with_grad": "how transformers runs the model (unpadded batches)",
               **dict.fromkeys(("sparse_prediction", "sparse_pred_ignore_index"),
                               "only with labels: which positions the training loss reads"),
               "initializer_cutoff_factor": "initialisation of untrained weights",
               "layer_norm_eps": "ModernBERT reads norm_eps; ModernBERT-base's config.json carries this too",
               "position_embedding_type": "ModernBERT has no position table (rotary only) and never reads this"}

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        mlm = self.reads_head(source)
        layers = number(c, "num_hidden_layers", where, default=22)
        act = activation(c, "hidden_activation", where, "gelu")
        if mlm and activation(c, "classifier_activation", where, "gelu") != act:
            raise TfspecError(f"{where}: classifier_activation: {_show(c['classifier_activation'])} is not supported "
                              f"with hidden_activation {_show(c.get('hidden_activation', 'gelu'))}: tfspec's masked-LM "
                              "head applies the layers' activation")
        max_len = number(c, "max_position_embeddings", where, default=8192)
        return {"family": self.family, "vocab": self._vocab(source),
                "d_model": number(c, "hidden_size", where, default=768),
                "heads": number(c, "num_attention_heads", where, default=12),
                "d_ff": number(c, "intermediate_size", where, default=1152), "activation": act, "gated": True,
                "dropout": number(c, "embedding_dropout", where, float, 0.0),
                "attention_dropout": number(c, "attention_dropout", where, float, 0.0),
                "activation_dropout": number(c, "mlp_dropout", where, float, 0.0), "label_smoothing": 0.0,
                "positional": {"kind": "rotary", "base": self._theta(c, where, "full_attention"), "max_len": max_len},
                "norm": "pre", "norm_bias": flag(c, "norm_bias", where),
                "norm_eps": number(c, "norm_eps", where, float, 1e-5),
                "final_norm": True, "embed_norm": True, "embed_scale": False,
                "bias": flag(c, "attention_bias", where),
                "biases": {"ffn": flag(c, "mlp_bias", where), "head": flag(c, "classifier_bias", where)},
                "head_transform": mlm, "output_bias": mlm and flag(c, "decoder_bias", where, True),
                "tie_embeddings": "output", "encoder": {"groups": self._groups(c, where, layers, max_len)}}

    def _vocab(self, source: Source) -> dict:
        """pad, bos ([CLS]) and eos ([SEP]) from the config; unk and mask as ``special_ids`` finds them."""
        c, where = source.config, source.where
        size = number(c, "vocab_size", where, default=50368)
        ids = {"pad_id": number(c, "pad_token_id", where, default=50283),
               "bos_id": number(c, "bos_token_id", where, default=50281),
               "eos_id": number(c, "eos_token_id", where, default=50282)}
        return {"size": size, **self.special_ids(source, size, ids)}

    def _groups(self, c: dict, where: str, layers: int, max_len: int) -> list[dict]:
        """Runs of alike layers: each layer's attention (global, or local with its own rotary
        base) and GeGLU, the first layer's attention reading the embeddings' norm directly."""
        local = number(c, "local_attention", where, default=128)
        if local < 2:
            raise TfspecError(f"{where}: local_attention must be at least 2 (a window of local_attention // 2 "
                              f"tokens each side), got {local}")
        sliding = {"kind": "restricted_self_attention", "r": local // 2,
                   "positions": {"kind": "rotary", "base": self._theta(c, where, "sliding_attention"),
                                 "max_len": max_len}}
        blocks = [[({"kind": "self_attention"} if kind == "full_attention" else sliding) |
                   ({"input_norm": False} if i == 0 else {}), "ffn"]
                  for i, kind in enumerate(self._layer_kinds(c, where, layers))]
        return [{"layers": len(list(run)), "block": json.loads(block)}
                for block, run in groupby(json.dumps(block) for block in blocks)]

    def _layer_kinds(self, c: dict, where: str, layers: int) -> list[str]:
        """``layer_types``; when absent, global every ``global_attn_every_n_layers``-th layer from the first."""
        kinds = c.get("layer_types")
        if kinds is None:
            every = number(c, "global_attn_every_n_layers", where, default=3)
            if every < 1:
                raise TfspecError(f"{where}: global_attn_every_n_layers must be positive, got {every}")
            kinds = [LAYER_TYPES[i % every == 0] for i in range(layers)]
        if not isinstance(kinds, list) or any(kind not in LAYER_TYPES for kind in kinds):
            raise TfspecError(f"{where}: layer_types: {_show(kinds)} is not supported; tfspec reads a list of "
                              f"{' or '.join(LAYER_TYPES)}, one a layer")
        if len(kinds) != layers:
            raise TfspecError(f"{where}: layer_types gives {len(kinds)} layers; num_hidden_layers is {layers}")
        return kinds

    def _theta(self, c: dict, where: str, kind: str) -> float:
        """The rotary base of ``kind`` layers: its ``rope_parameters`` entry, else the older field."""
        settings = c.get("rope_parameters") or {}
        if not isinstance(settings, dict) or not set(settings) <= set(LAYER_TYPES) or not all(
                isinstance(v, dict) for v in settings.values() if v is not None):
            raise TfspecError(f"{where}: rope_parameters must be an object of rotary settings per layer type "
                              f"({', '.join(LAYER_TYPES)}), got {_show(settings)}")
        rope = settings.get(kind) or {}
        if rope.get("rope_type", "default") != "default" or not set(rope) <= {"rope_type", "rope_theta"}:
            raise TfspecError(f"{where}: rope_parameters.{kind}: {_show(rope)} is not supported; tfspec imports "
                              f"{self.title} with rope_type default and a rope_theta")
        field, default = THETA[kind]
        theta = number(rope, "rope_theta", where, float) if "rope_theta" in rope else number(c, field, where, float,
                                                                                              default)
        if theta <= 1:
            raise TfspecError(f"{where}: the rotary base of {kind} layers must exceed 1, got {theta}")
        return theta

    def rules(self, spec, architecture: str) -> list[Rule]:
        d_ff = spec.plan("encoder")[0].ffn.d_ff
        rules = [Rule("encoder.embed.weight", ("embeddings.tok_embeddings.weight",)),
                 *norms(spec, "encoder.embed_norm", "embeddings.norm"), *norms(spec, "encoder.norm", "final_norm")]
        for layer in spec.plan("encoder"):
            ours, theirs = f"encoder.layers.{layer.index}.", f"layers.{layer.index}."
            rules += [*dense_rules(ours + "self_attn.w_qkv", ours + "self_attn.b_qkv", theirs + "attn.Wqkv", spec.bias),
                      *dense_rules(ours + "self_attn.w_o", ours + "self_attn.b_o", theirs + "attn.Wo", spec.bias),
                      *norms(spec, ours + "ffn_norm", theirs + "mlp_norm"),
                      *dense_rules(ours + "ffn.w_2", ours + "ffn.b_2", theirs + "mlp.Wo", spec.has_bias("ffn"))]
            if layer.attention.input_norm:
                rules += norms(spec, ours + "self_attn_norm", theirs + "attn_norm")
            for part, role in enumerate("13"):  # Wi: the activation's input, then the gate
                rules.append(Rule(f"{ours}ffn.w_{role}", (f"{theirs}mlp.Wi.weight",), Split((d_ff, d_ff), part)))
                if spec.has_bias("ffn"):
                    rules.append(Rule(f"{ours}ffn.b_{role}", (f"{theirs}mlp.Wi.bias",), Split((d_ff, d_ff), part)))
        return rules + self.head_rules(spec)

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if spec.positional.kind != "rotary":
            return f"{self.title} rotates queries and keys (positional rotary), not {spec.positional.kind}"
        kinds = ("self_attention", "restricted_self_attention")
        if any(layer.attention is None or layer.attention.kind not in kinds or layer.ffn is None
               or len(layer.sublayers) != 2 for layer in spec.plan("encoder")):
            return f"each {self.title} layer is self-attention (global or restricted), then a feed-forward layer"
        return None

    def config(self, spec) -> dict:
        plan, v = spec.plan("encoder"), spec.vocab
        attention, ffn = [layer.attention for layer in plan], plan[0].ffn
        local = [a for a in attention if a.kind == "restricted_self_attention"]
        act = ACTIVATION_NAMES[ffn.activation]
        bases = {"full_attention": spec.positional.base, "sliding_attention": local[0].positions.base if local
                 else THETA["sliding_attention"][1]}
        return {"architectures": [self.architecture_for(spec)], "model_type": self.model_type,
                "vocab_size": v.size, "hidden_size": spec.d_model, "intermediate_size": ffn.d_ff,
                "num_hidden_layers": len(plan), "num_attention_heads": attention[0].heads,
                "hidden_activation": act, "classifier_activation": act,
                "max_position_embeddings": spec.positional.max_len, "norm_eps": spec.norm_eps,
                "norm_bias": spec.uses_norm_bias, "pad_token_id": v.pad_id, "bos_token_id": v.bos_id,
                "eos_token_id": v.eos_id, "cls_token_id": v.bos_id, "sep_token_id": v.eos_id,
                "attention_bias": spec.has_bias("q"), "mlp_bias": spec.has_bias("ffn"),
                "classifier_bias": spec.has_bias("head"), "decoder_bias": spec.output_bias,
                "local_attention": 2 * local[0].r if local else 128,
                "layer_types": [LAYER_TYPES[a.kind != "restricted_self_attention"] for a in attention],
                "rope_parameters": {kind: {"rope_type": "default", "rope_theta": base} for kind, base in bases.items()},
                "embedding_dropout": spec.dropout, "attention_dropout": spec.attention_dropout,
                "mlp_dropout": spec.activation_dropout, "tie_word_embeddings": True}
