"""ViT (``model_type: vit``): transformers' ViTModel and ViTForImageClassification as tfspec specs
(Dosovitskiy et al. 2021).

A pre-norm encoder over image patches (``tfspec.spec.patches``): the patch embedding (a
convolution of stride p), a class token, learned positions over the patch grid (resized
bicubically for other image sizes, as ``interpolate_pos_encoding=True``), LayerNorm after the last
layer; ViTModel adds the tanh pooler of the class token, ViTForImageClassification a linear
classifier on it (the ``image_classification`` head). Query, key and value are separate matrices
in the checkpoint and one ``w_qkv`` in tfspec. DeiT and DINOv2 subclass it (``deit.py``,
``dinov2.py``). Defaults are ViTConfig's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import (ACTIVATION_NAMES, Family, Rule, Source, _show, activation, flag, norm_rules,
                                      number, register, repeated_layer)
from tfspec.interop.hf.layouts import Concat
from tfspec.interop.hf.task_heads import _labels

VOCAB = {"size": 4}
"""An image model reads no token ids; a spec's vocabulary then holds only the four special ids."""


@dataclass(frozen=True)
class BatchedRows(Concat):
    """The IR rows stored as (1, rows, d) tensors, one per group of rows (transformers' cls_token,
    distillation_token and position_embeddings, each with a leading batch axis of 1)."""

    def hf_shapes(self, shape, count):
        return [(1, *s) for s in super().hf_shapes(shape, count)]

    def to_ir(self, parts):
        return super().to_ir([p[0] for p in parts])

    def to_hf(self, value, count):
        return [part[None] for part in super().to_hf(value, count)]


def square(config: dict, key: str, where: str, default: int) -> int:
    """``image_size``/``patch_size``: one integer, or [n, n] (transformers' position
    interpolation reshapes the table as a square, so the sides must agree)."""
    value = config.get(key, default)
    if isinstance(value, list) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if isinstance(value, list):
        raise TfspecError(f"{where}: {key}: {_show(value)} is not supported; tfspec imports square images and "
                          "patches (transformers resizes the position table as a square)")
    return number({key: value}, key, where)


@register
class ViT(Family):
    model_type = "vit"
    family = "encoder-only"
    title = "ViT"
    architectures = {"ViTModel": "", "ViTForImageClassification": "vit."}
    export_architecture = "ViTModel"
    classifier_architecture = "ViTForImageClassification"
    heads = ("classifier.",)
    mapped = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
              "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps", "image_size", "patch_size",
              "num_channels", "qkv_bias", "pooler_act", "pooler_output_size")
    ignored = {"encoder_stride": "the masked-image-modelling decoder's upsampling (ViTForMaskedImageModeling), "
                                 "which the model and its classifier do not have"}
    defaults: ClassVar[dict] = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                                "intermediate_size": 3072, "layer_norm_eps": 1e-12, "image_size": 224,
                                "patch_size": 16, "hidden_act": "gelu"}
    pooled = True
    """The base model has the tanh pooler of the class token (``pooler.dense``)."""
    norms = ("layernorm_before", "layernorm_after")
    mlp = ("intermediate.dense", "output.dense")
    """The MLP's two linear layers in the checkpoint (DINOv2: ``mlp.fc1``, ``mlp.fc2``)."""
    renamed: ClassVar[tuple[tuple[str, str], ...]] = (
        ("attention.q_proj", "attention.attention.query"), ("attention.k_proj", "attention.attention.key"),
        ("attention.v_proj", "attention.attention.value"), ("attention.o_proj", "attention.output.dense"),
        ("mlp.fc1", "intermediate.dense"), ("mlp.fc2", "output.dense"))
    """transformers 5's names of a layer's tensors -> the names its ``save_pretrained`` and the
    published checkpoints store (``encoder.layer.{i}``, BERT's names), which ``rules`` reads."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        d = number(c, "hidden_size", where)
        qkv = flag(c, "qkv_bias", where, True)
        data = {"family": self.family, "vocab": VOCAB, "d_model": d,
                "heads": number(c, "num_attention_heads", where), **self._ffn(c, where, d),
                "dropout": number(c, "hidden_dropout_prob", where, float, 0.0),
                "attention_dropout": number(c, "attention_probs_dropout_prob", where, float, 0.0),
                "label_smoothing": 0.0, "positional": {"kind": "none"}, "norm": "pre", "final_norm": True,
                "norm_eps": number(c, "layer_norm_eps", where, float),
                "biases": {"q": qkv, "k": qkv, "v": qkv, "o": True, "ffn": True},
                "patches": self._patches(c, where),
                "encoder": {"layers": number(c, "num_hidden_layers", where), "block": ["self_attention", "ffn"]}}
        if source.architecture == self.export_architecture:
            data["pooler"] = self._pooler(source, c, where, d)
        else:
            data["head"] = self._head(source.architecture, c, where)
        return data

    def _ffn(self, c: dict, where: str, d: int) -> dict:
        return {"d_ff": number(c, "intermediate_size", where), "activation": activation(c, "hidden_act", where, "gelu")}

    def _patches(self, c: dict, where: str) -> dict:
        size, patch = square(c, "image_size", where, 224), square(c, "patch_size", where, 16)
        channels = number(c, "num_channels", where, default=3)
        if not 1 <= patch <= size:
            raise TfspecError(f"{where}: patch_size ({patch}) must be 1 .. image_size ({size})")
        return {"image_size": size, "patch_size": patch, "channels": channels}

    def _pooler(self, source: Source, c: dict, where: str, d: int) -> bool:
        """Whether the base model has the pooler (its tensors, or a configuration alone: ViTModel's
        default), checked to be the tanh layer of width hidden_size tfspec computes."""
        if not self.pooled or (source.names is not None and "pooler.dense.weight" not in source.names):
            return False
        if c.get("pooler_act", "tanh") != "tanh":
            raise TfspecError(f"{where}: pooler_act: {_show(c['pooler_act'])} is not supported; tfspec's pooler "
                              "is tanh(W x + b)")
        if c.get("pooler_output_size", d) != d:
            raise TfspecError(f"{where}: pooler_output_size ({_show(c['pooler_output_size'])}) must equal "
                              f"hidden_size ({d}): tfspec's pooler keeps the width")
        return True

    def _head(self, architecture: str, c: dict, where: str) -> dict:
        labels = _labels(c, where)
        classes = len(labels) if labels is not None else number(c, "num_labels", where, default=2)
        if classes < 1:
            raise TfspecError(f"{where}: num_labels: {classes} is not supported; with no labels transformers' "
                              f"{architecture} has no classifier (nn.Identity), tfspec's head needs one")
        named = {"labels": labels} if labels not in (None, [f"LABEL_{i}" for i in range(classes)]) else {}
        return {"kind": "image_classification", "classes": classes, **self._pooling(architecture), **named}

    def _pooling(self, architecture: str) -> dict:
        return {"pooling": "class_token"}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("encoder.patch_embed.weight", ("embeddings.patch_embeddings.projection.weight",)),
                 Rule("encoder.patch_embed.bias", ("embeddings.patch_embeddings.projection.bias",)),
                 Rule("encoder.tokens.tokens", self._tokens(spec), BatchedRows()),
                 Rule("encoder.pos.weight", ("embeddings.position_embeddings",), BatchedRows())]
        for i in range(spec.encoder.num_layers):
            rules += self._layer_rules(spec, f"encoder.layers.{i}.", f"encoder.layer.{i}.")
        rules += norm_rules("encoder.norm", "layernorm")
        if spec.pooler:
            rules += [Rule("encoder.pooler.w_pool", ("pooler.dense.weight",)),
                      Rule("encoder.pooler.b_pool", ("pooler.dense.bias",))]
        return rules + self._head_rules(spec)

    def _tokens(self, spec) -> tuple[str, ...]:
        return ("embeddings.cls_token",)

    def _layer_rules(self, spec, ours: str, theirs: str) -> list[Rule]:
        qkv = [f"{theirs}attention.attention.{part}" for part in ("query", "key", "value")]
        rules = [Rule(ours + "self_attn.w_qkv", tuple(f"{p}.weight" for p in qkv), Concat()),
                 Rule(ours + "self_attn.w_o", (f"{theirs}attention.output.dense.weight",)),
                 Rule(ours + "self_attn.b_o", (f"{theirs}attention.output.dense.bias",)),
                 *norm_rules(ours + "self_attn_norm", theirs + self.norms[0]),
                 *norm_rules(ours + "ffn_norm", theirs + self.norms[1]),
                 *self._ffn_rules(spec, ours + "ffn.", theirs)]
        if spec.has_bias("q"):
            rules.append(Rule(ours + "self_attn.b_qkv", tuple(f"{p}.bias" for p in qkv), Concat()))
        return rules

    def _ffn_rules(self, spec, ours: str, theirs: str) -> list[Rule]:
        return [Rule(f"{ours}{w}_{n}", (f"{theirs}{layer}.{t}",)) for n, layer in zip("12", self.mlp)
                for w, t in (("w", "weight"), ("b", "bias"))]

    def _head_rules(self, spec) -> list[Rule]:
        if spec.head is None:
            return []
        return [Rule(f"classifier.{p}", (f"classifier.{p}",)) for p in ("weight", "bias")]

    def rename(self, name: str) -> str:
        """A tensor named as transformers 5 holds it in memory (``layers.{i}.attention.q_proj``) ->
        as checkpoints store it (``renamed``)."""
        if name.startswith("layers."):
            name = "encoder.layer." + name.removeprefix("layers.")
        for new, stored in self.renamed:
            name = name.replace(f".{new}.", f".{stored}.")
        return name

    def dropped(self, architecture: str) -> dict[str, str]:
        if architecture == self.export_architecture:
            return {"classifier.*": f"a classifier, not part of {architecture}"}
        return {"pooler.*": f"a pooler (the base model's), which {architecture} does not read"}

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if spec.patches is None:
            return f"{self.title} reads image patches: give the spec patches"
        if spec.head is not None and spec.head.kind != "image_classification":
            return f"{self.title} has no {spec.head.kind} head"
        if spec.head is None and spec.pooler != self.pooled:
            state = "always has" if self.pooled else "has no"
            return f"transformers' {self.export_architecture} {state} a pooler: set pooler: {str(self.pooled).lower()}"
        return None

    def architecture_for(self, spec) -> str:
        return self.export_architecture if spec.head is None else self.classifier_architecture

    def outputs(self, architecture: str) -> dict[str, str]:
        if architecture != self.export_architecture:
            return {"logits": "logits"}
        return {"memory": "last_hidden_state"} | ({"pooled": "pooler_output"} if self.pooled else {})

    def config(self, spec) -> dict:
        attention, ffn = repeated_layer(spec, "encoder")
        patches = spec.patches
        config = {"architectures": [self.architecture_for(spec)], "model_type": self.model_type,
                  "hidden_size": spec.d_model, "num_hidden_layers": spec.encoder.num_layers,
                  "num_attention_heads": attention.heads, **self._ffn_config(ffn),
                  "hidden_dropout_prob": spec.dropout, "attention_probs_dropout_prob": spec.attention_dropout,
                  "layer_norm_eps": spec.norm_eps, "image_size": patches.image_size,
                  "patch_size": patches.patch_size, "num_channels": patches.channels, "qkv_bias": spec.has_bias("q")}
        if spec.pooler:
            config |= {"pooler_act": "tanh", "pooler_output_size": spec.d_model}
        head = spec.head
        if head is not None:
            names = head.labels or [f"LABEL_{i}" for i in range(head.classes)]
            config |= {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}
        return config

    def _ffn_config(self, ffn) -> dict:
        return {"intermediate_size": ffn.d_ff, "hidden_act": ACTIVATION_NAMES.get(ffn.activation, ffn.activation)}

