"""The image classifier: one distribution over classes per image, read from the encoder's output
of a ``patches`` spec (``tfspec.spec.patches``): the ``head: {kind: image_classification}`` of a
spec, one of ``tfspec.spec.heads.Head``'s kinds.

How the image is summed up (``pooling``), as published image classifiers do:

- ``class_token``: the class token's final state, z_L^0 (ViT eq. 4; ViTForImageClassification,
  DeiTForImageClassification);
- ``patch_mean``: the mean of the patches' final states (no class token needed);
- ``class_token_and_patch_mean``: both side by side, 2 d_model features (Dinov2ForImageClassification:
  the linear probe of Oquab et al. 2023, §7.1).

With ``distillation`` a second classifier reads DeiT's distillation token and the logits are the
two classifiers' mean (Touvron et al. 2021, §5.1: "the class token and distillation token ...
add their softmax output": DeiTForImageClassificationWithTeacher adds the logits, halved).

The spec's ``image_pooler`` (``ImagePooler``) makes the pooled features a model output of their own,
``pooled``, optionally normed (BEiT's pooler: LayerNorm of the patches' mean, Bao et al. 2022 §3.1);
a head with ``pooling: pooler`` classifies that output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from tfspec.spec.base import SpecModel
from tfspec.spec.bounds import MAX_VOCAB

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec

READS = {"class_token": ("class",), "patch_mean": ("patch_mean",),
         "class_token_and_patch_mean": ("class", "patch_mean")}
"""pooling -> the parts of the encoder's output the classifier reads, side by side (``token_pool``)."""
Pooling = Literal["class_token", "patch_mean", "class_token_and_patch_mean"]


class ImagePooler(SpecModel):
    """The ``pooled`` output of an image encoder: the pooled features, optionally normed
    (BeitModel's pooler_output: LayerNorm(mean of the patches) with use_mean_pooling, else the
    class token's state)."""

    pooling: Pooling = "patch_mean"
    """What is pooled (as an image head's ``pooling``)."""
    norm: bool = True
    """The spec's norm (``norm_type``, ``norm_eps``) over the pooled features (BEiT's mean pooling,
    which replaces the encoder's final norm: ``final_norm: false``)."""

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when ``spec`` cannot carry this pooler."""
        if spec.patches is None:
            return "image_pooler", "image_pooler pools image patches: give the spec patches"
        if "class" in READS[self.pooling] and not spec.patches.class_token:
            return "image_pooler.pooling", f"pooling {self.pooling} reads the class token: set patches.class_token"
        if spec.pooler:
            return "image_pooler", "pooler and image_pooler both give the pooled output: keep one"
        return None

    def width(self, spec: Spec) -> int:
        return len(READS[self.pooling]) * spec.d_model

    def lower(self, b: LayerBuilder, memory: str) -> str:
        """(B, width): ``token_pool`` of the parts read, then the norm if any."""
        x = b.op("encoder.image_pooler", "token_pool", [memory], component="pooler", shape=("B", self.width(b.spec)),
                 attrs={"reads": list(READS[self.pooling]), "prefix": b.spec.patches.prefix})
        return b.norm("encoder.image_pooler_norm", x, self.width(b.spec), rows=("B",)) if self.norm else x


class ImageClassificationHead(SpecModel):
    """One label per image, from the class token, the patches' mean or both."""

    kind: Literal["image_classification"] = "image_classification"
    classes: Annotated[int, Field(ge=1, le=MAX_VOCAB)]
    """How many labels the head tells apart (the width of its logits); 1: a score (regression)."""
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] | None = None
    """Dropout on the classifier's input while training; None: the spec's ``dropout``."""
    labels: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = None
    """The name of each class in id order (transformers' id2label); None: unnamed (LABEL_0, ...)."""
    pooling: Pooling | Literal["pooler"] = "class_token"
    """What the classifier reads (the module docstring); pooler: the spec's ``image_pooler`` output."""
    distillation: bool = False
    """DeiT's second classifier on the distillation token, the two logits averaged."""

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when ``spec`` cannot carry this head."""
        patches = spec.patches
        if patches is None:
            return "head", "an image_classification head reads image patches: give the spec patches"
        if self.pooling == "pooler" and spec.image_pooler is None:
            return "head.pooling", "pooling pooler reads the spec's image_pooler: set image_pooler"
        if "class" in READS.get(self.pooling, ()) and not patches.class_token:
            return "head.pooling", f"pooling {self.pooling} reads the class token: set patches.class_token"
        if self.distillation and not patches.distillation_token:
            return "head.distillation", "the distillation classifier reads DeiT's token: set patches.distillation_token"
        if self.labels is not None and (len(self.labels) != self.classes or len(set(self.labels)) != self.classes):
            return "head.labels", f"{len(self.labels)} labels for {self.classes} classes: give each class one name"
        return None

    @property
    def transform(self) -> None:
        """No dense layer before the classifier (what callers of the text heads ask)."""
        return None

    def p(self, spec) -> float:
        return spec.dropout if self.dropout is None else self.dropout

    def lower(self, b: LayerBuilder, memory: str, pooled: str | None) -> str:
        """logits (B, classes) of the pooled features; with ``distillation``, the mean of those and
        of the distillation token's classifier."""
        if self.pooling == "pooler":  # the spec's image_pooler output
            pooler = b.spec.image_pooler
            logits = self._classify(b, pooled, pooler.width(b.spec), len(READS[pooler.pooling]), "classifier")
        else:
            logits = self._classify_pooled(b, memory, READS[self.pooling], "classifier")
        if not self.distillation:
            return logits
        distilled = self._classify_pooled(b, memory, ("distillation",), "distillation_classifier")
        return b.op("head.average", "average", [logits, distilled], component="head", shape=("B", self.classes))

    def _classify_pooled(self, b: LayerBuilder, memory: str, reads: tuple[str, ...], name: str) -> str:
        """``token_pool`` of ``reads`` (B, len(reads) d), dropout, then x W^T + b."""
        width = len(reads) * b.spec.d_model
        x = b.op(f"head.{name}_pool", "token_pool", [memory], component="head", shape=("B", width),
                 attrs={"reads": list(reads), "prefix": b.spec.patches.prefix})
        return self._classify(b, x, width, len(reads), name)

    def _classify(self, b: LayerBuilder, x: str, width: int, parts: int, name: str) -> str:
        """Dropout of the (B, width) features ``x`` (``parts`` d_model-wide vectors side by side), then x W^T + b."""
        x = b.op(f"{name}_dropout", "dropout", [x], attrs={"p": self.p(b.spec)}, shape=("B", width))
        parts = {"parts": parts} if parts > 1 else {}
        return b.op(name, "classifier", [x], attrs={"classes": self.classes, **parts}, component="head",
                    params={"weight": ((self.classes, width), "normal:0.02"), "bias": ((self.classes,), "zeros")},
                    shape=("B", self.classes))
