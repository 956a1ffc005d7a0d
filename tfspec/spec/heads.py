"""Task heads: what an encoder-only model outputs instead of the masked-LM projection.

``head: {kind: sequence_classification, classes: 3}`` gives one distribution over classes per
input (BERT's ``BertForSequenceClassification``: sentence labels, language identification);
``head: {kind: token_classification, classes: 9}`` one per position
(``BertForTokenClassification``: tagging). Either replaces the pre-softmax projection: the
``logits`` port is then (B, classes) or (B, S, classes). Each head lowers itself into the IR
(``lower``), so its parameters and FLOPs reach ``tfspec report`` and both backends; the
dense layer is named ``classifier`` as in transformers.

Other heads join the ``Head`` union with their own ``kind``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import Field

from tfspec.spec.base import SpecModel
from tfspec.spec.bounds import MAX_VOCAB

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder

Probability = Annotated[float, Field(ge=0.0, lt=1.0)]
Classes = Annotated[int, Field(ge=2, le=MAX_VOCAB)]


class _Classifier(SpecModel):
    classes: Classes
    """How many labels the head tells apart (the width of its logits)."""
    dropout: Probability | None = None
    """Dropout on the classifier's input while training; None: the spec's ``dropout`` (as
    transformers' ``classifier_dropout`` falls back to ``hidden_dropout_prob``)."""

    def _classify(self, b: LayerBuilder, x: str, shape: tuple) -> str:
        """Dropout, then logits = x W^T + b with W (classes, d_model)."""
        d = b.spec.d_model
        x = b.op("classifier_dropout", "dropout", [x], attrs={"p": self.p(b.spec)}, shape=shape[:-1] + (d,))
        return b.op("classifier", "classifier", [x], attrs={"classes": self.classes}, component="head",
                    params={"weight": ((self.classes, d), "normal:0.02"), "bias": ((self.classes,), "zeros")},
                    shape=shape)

    def p(self, spec) -> float:
        return spec.dropout if self.dropout is None else self.dropout

    def check(self, spec) -> str | None:
        """A message if this head cannot work with ``spec``."""
        return None


class SequenceClassificationHead(_Classifier):
    """One label per input sequence, from one vector per sequence."""

    kind: Literal["sequence_classification"] = "sequence_classification"
    pooling: Literal["first", "mean"] | None = None
    """first: the first position through BERT's pooler (needs ``pooler: true``), as
    BertForSequenceClassification; mean: the mean of the encoder outputs over the non-padded
    positions (no pooler needed; suits tokenizers that put no [CLS] first). None: first when
    the spec has a pooler, else mean."""

    def resolved_pooling(self, spec) -> str:
        return self.pooling or ("first" if spec.pooler else "mean")

    def check(self, spec) -> str | None:
        if self.resolved_pooling(spec) == "first" and not spec.pooler:
            return ("pooling 'first' reads BERT's pooler, which this spec lacks: set pooler: true, or pooling: "
                    "mean")
        return None

    def lower(self, b: LayerBuilder, memory: str, pooled: str | None) -> str:
        if self.resolved_pooling(b.spec) == "mean":
            pooled = b.op("head.mean_pool", "mean_pool", [memory], component="head", shape=("B", b.spec.d_model))
        return self._classify(b, pooled, ("B", self.classes))


class TokenClassificationHead(_Classifier):
    """One label per position (tagging), from each encoder output."""

    kind: Literal["token_classification"] = "token_classification"

    def lower(self, b: LayerBuilder, memory: str, pooled: str | None) -> str:
        return self._classify(b, memory, ("B", "S", self.classes))


Head = Annotated[Union[SequenceClassificationHead, TokenClassificationHead], Field(discriminator="kind")]
