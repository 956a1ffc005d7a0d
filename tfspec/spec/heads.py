"""Output heads in place of the pre-softmax token projection: the ``head`` field of a spec.

``head: {kind: sequence_classification, classes: 3}`` gives one distribution over classes per
input (BERT's ``BertForSequenceClassification``: sentence labels, language identification);
``head: {kind: token_classification, classes: 9}`` one per position
(``BertForTokenClassification``: tagging); ``head: {kind: answer_span}`` the start and end
logits of an answer at each position (``BertForQuestionAnswering``); a classifier may read a
dense ``transform`` first (RoBERTa's and DeBERTa's classification heads) and name its
``labels``; ``head: {kind: ctc, alphabet: ...}`` per-frame
log-probabilities of labels and a blank (CTC). The ``logits`` port is then (B, classes) or
(B, S, classes). Each kind is one model with ``kind`` as its tag, ``check(spec)`` for
cross-field rules and ``lower`` for its IR, so its parameters and FLOPs reach ``tfspec report``
and both backends; ``Head`` is the discriminated union of the kinds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import Field

from tfspec.spec.base import SpecModel
from tfspec.spec.bounds import MAX_VOCAB, TokenId, Width
from tfspec.spec.embedding_heads import EmbeddingHead
from tfspec.spec.image_heads import ImageClassificationHead

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec

Probability = Annotated[float, Field(ge=0.0, lt=1.0)]
Classes = Annotated[int, Field(ge=2, le=MAX_VOCAB)]


HeadActivation = Literal["tanh", "gelu", "gelu_tanh", "relu", "silu"]
"""Activations of the task heads' dense layers (RoBERTa's tanh, ELECTRA's and DeBERTa's GELU,
DistilBERT's ReLU)."""


class Transform(SpecModel):
    """A dense layer act(x W + b), d_model to d_model, between the pooled (or per-position) vector
    and the classifier: RoBERTa's and ELECTRA's classifier.dense, DeBERTa's ContextPooler,
    DistilBERT's pre_classifier; normalised after the activation with ``norm`` (ModernBERT's
    prediction head, dense + activation + LayerNorm, in front of all its task classifiers)."""

    activation: HeadActivation
    bias: bool = True
    """Whether the dense layer adds a bias b (ModernBERT's classifier_bias, off in its published models)."""
    norm: bool = False
    """Normalise act(x W + b) with the spec's norm (its type, epsilon, gain and bias) before the classifier."""


class _Classifier(SpecModel):
    classes: Classes
    """How many labels the head tells apart (the width of its logits)."""
    dropout: Probability | None = None
    """Dropout on the classifier's input while training; None: the spec's ``dropout`` (as
    transformers' ``classifier_dropout`` falls back to ``hidden_dropout_prob``)."""
    transform: Transform | None = None
    """A dense layer before the classifier (its input dropped out too while training); None: none
    (BERT's classifier reads the pooler's or the encoder's output directly)."""
    labels: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = None
    """The name of each class in id order (transformers' id2label); None: unnamed (LABEL_0, ...)."""

    def _classify(self, b: LayerBuilder, x: str, shape: tuple, features: int | None = None) -> str:
        """Dropout, the transform if any (and its norm; then dropout again), then logits = x W^T + b
        with W (classes, features), ``features`` d_model unless a projection narrowed x."""
        d, t = b.spec.d_model, self.transform
        if t is not None:
            x = b.op("head.dropout", "dropout", [x], attrs={"p": self.p(b.spec)}, shape=shape[:-1] + (d,))
            x = b.op("head.transform", "dense", [x], attrs={"activation": t.activation}, component="head",
                       params={"weight": ((d, d), "xavier_uniform")} | ({"bias": ((d,), "zeros")} if t.bias else {}),
                       shape=shape[:-1] + (d,))
            if t.norm:
                x = b.norm("head.transform_norm", x, rows=shape[:-1])
        width = features or d
        x = b.op("classifier_dropout", "dropout", [x], attrs={"p": self.p(b.spec)}, shape=shape[:-1] + (width,))
        narrower = {"features": width} if width != d else {}
        return b.op("classifier", "classifier", [x], attrs={"classes": self.classes, **narrower}, component="head",
                    params={"weight": ((self.classes, width), "normal:0.02"), "bias": ((self.classes,), "zeros")},
                    shape=shape)

    def p(self, spec) -> float:
        return spec.dropout if self.dropout is None else self.dropout

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when ``spec`` cannot carry this head."""
        if self.labels is not None and len(self.labels) != self.classes:
            return "head.labels", f"{len(self.labels)} labels name {self.classes} classes: give one name per class"
        if self.labels is not None and len(set(self.labels)) != len(self.labels):
            return "head.labels", "two classes have one name: each label names one class"
        return None


class SequenceClassificationHead(_Classifier):
    """One label per input sequence, from one vector per sequence."""

    kind: Literal["sequence_classification"] = "sequence_classification"
    classes: Annotated[int, Field(ge=1, le=MAX_VOCAB)]
    """How many labels the head tells apart (the width of its logits); 1: a score (regression)."""
    pooling: Literal["first", "mean"] | None = None
    """first: the first position, through BERT's pooler when the spec has one
    (BertForSequenceClassification), else through the head's ``transform`` (RoBERTa's
    classifier.dense, DeBERTa's ContextPooler), else itself (XLM's sequence_summary); mean: the mean of the encoder outputs over the
    non-padded positions (suits tokenizers that put no [CLS] first). None: first when the spec
    has a pooler, else mean."""
    problem: Literal["single_label", "multi_label", "regression"] | None = None
    """What the logits are trained as (transformers' problem_type): a softmax over the classes,
    a sigmoid per class, or scores; None: as transformers infers it (regression for one class,
    else single_label). The logits are the same either way."""
    projection: Width | None = None
    """A linear map of the pooled vector to this width, no activation, before the classifier
    (wav2vec 2.0's, HuBERT's and WavLM's ``projector``, classifier_proj_size: transformers maps every
    frame, then takes the mean; the mean of an affine map is the map of the mean, so tfspec maps the
    one pooled vector). None: the classifier reads d_model features."""

    def check(self, spec: Spec) -> tuple[str, str] | None:
        if self.projection is not None and self.transform is not None:
            return "head.projection", ("a projection narrows the pooled vector for the classifier; a transform "
                                       "maps d_model to d_model before it: set one of them")
        return super().check(spec)

    def resolved_pooling(self, spec) -> str:
        return self.pooling or ("first" if spec.pooler else "mean")

    def lower(self, b: LayerBuilder, memory: str, pooled: str | None) -> str:
        if self.resolved_pooling(b.spec) == "mean":
            pooled = b.op("head.mean_pool", "mean_pool", [memory], component="head", shape=("B", b.spec.d_model))
        elif pooled is None:  # the first position itself, which the transform reads (RoBERTa)
            pooled = b.op("head.first", "first", [memory], component="head", shape=("B", b.spec.d_model))
        if self.projection is not None:
            p = self.projection
            pooled = b.op("head.projector", "projector", [pooled], attrs={"width": p}, component="head",
                          params={"weight": ((p, b.spec.d_model), "xavier_uniform"), "bias": ((p,), "zeros")},
                          shape=("B", p))
        return self._classify(b, pooled, ("B", self.classes), self.projection)


class TokenClassificationHead(_Classifier):
    """One label per position (tagging), from each encoder output."""

    kind: Literal["token_classification"] = "token_classification"

    def lower(self, b: LayerBuilder, memory: str, pooled: str | None) -> str:
        return self._classify(b, memory, ("B", "S", self.classes))


class AnswerSpanHead(_Classifier):
    """Extractive question answering: at each position, the logit of the answer span starting
    there and of it ending there (transformers' *ForQuestionAnswering qa_outputs), logits
    (B, S, 2): start, then end."""

    kind: Literal["answer_span"] = "answer_span"
    classes: Literal[2] = 2
    """Start and end."""
    labels: None = None

    def lower(self, b: LayerBuilder, memory: str, pooled: str | None) -> str:
        return self._classify(b, memory, ("B", "S", 2))


class CtcHead(SpecModel):
    """Connectionist temporal classification (Graves et al. 2006): per frame, log-probabilities
    of every label and of a blank (eq. 1); a labelling's probability sums over all frame paths
    that collapse to it (repeats merged, blanks dropped; eq. 2-3). ``vocab.size`` counts the
    labels plus the blank."""

    kind: Literal["ctc"] = "ctc"
    alphabet: str = Field(min_length=1, max_length=4096)
    """The labels, one character each, in id order with the blank's id skipped (``'0123456789'``
    with blank 0: id 1 is '0', id 10 is '9'); decoders print these characters."""
    blank: TokenId = 0
    """The blank's id (0, as torch.nn.functional.ctc_loss assumes by default)."""

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when ``spec`` cannot carry this head."""
        if spec.family != "encoder-only":
            return "family", f"a ctc head labels encoder frames: set family encoder-only (got {spec.family})"
        if len(set(self.alphabet)) != len(self.alphabet):
            return "head.alphabet", f"alphabet {self.alphabet[:60]!r} repeats a character: each label needs its own"
        if spec.vocab.size != len(self.alphabet) + 1:
            return "vocab.size", (f"vocab.size ({spec.vocab.size}) must be the labels plus the blank: "
                                  f"{len(self.alphabet)} + 1 = {len(self.alphabet) + 1}")
        if self.blank >= spec.vocab.size:
            return "head.blank", f"head.blank ({self.blank}) must be below vocab.size ({spec.vocab.size})"
        return None

    @property
    def symbols(self) -> list[str]:
        """The character of every output id ('' at the blank)."""
        chars = list(self.alphabet)
        return chars[:self.blank] + [""] + chars[self.blank:]

    def lower(self, b: LayerBuilder, x: str, pooled: str | None) -> str:
        """The projection to labels + blank (the ``logits``, returned) and its log-softmax over
        them (port ``log_probs``, the y_k^t of eq. 1 in log space)."""
        classes, d = b.spec.vocab.size, b.spec.d_model
        logits = b.op("output", "projection", [x], attrs={"vocab": classes, "scale": 1.0}, component="projection",
                      params={"weight": ((classes, d), "xavier_uniform"), "bias": ((classes,), "zeros")},
                      shape=("B", b.seq, classes))
        b.graph.ports["log_probs"] = b.op("output.log_softmax", "log_softmax", [logits], shape=("B", b.seq, classes))
        return logits


Head = Annotated[Union[SequenceClassificationHead, TokenClassificationHead, AnswerSpanHead, CtcHead,
                       ImageClassificationHead, EmbeddingHead], Field(discriminator="kind")]
"""Every head kind, told apart by ``kind``."""
