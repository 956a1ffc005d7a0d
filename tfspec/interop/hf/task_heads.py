"""Fine-tuned task heads of the encoder families: transformers' *ForSequenceClassification,
*ForTokenClassification and *ForQuestionAnswering as a spec's ``head`` (``tfspec.spec.heads``).

A family declares how its classes read the first position (``task_heads``, a ``Pooled``), and
``register`` files it with ``TaskHeads`` before it (``with_task_heads``), so that the task
classes pass through here first whatever the family's own methods assume: the base model is
imported as the family's *Model (without a pooler where the task class has none), and the
head from the tensors outside the base model's prefix, by what it computes:

- token classification (every family): ``classifier``, a linear layer on each position;
- question answering (every family): ``qa_outputs``, a linear layer to 2 on each position,
  start and end logits (the ``answer_span`` head);
- sequence classification, as the family's class reads its first position (``Pooled``):
  through the base model's pooler, then ``classifier`` (BERT, ALBERT, Megatron-BERT); through
  a dense layer and tanh in the head (RoBERTa, XLM-RoBERTa, CamemBERT, Data2VecText:
  ``classifier.dense``, ``classifier.out_proj``), or GELU (ELECTRA), or the configuration's
  ``pooler_hidden_act`` (DeBERTa-v2's ContextPooler, ``pooler.dense`` and ``classifier``), or
  ReLU (DistilBERT's ``pre_classifier``).

The labels come along: ``id2label`` names the classes (unless transformers' defaults LABEL_i),
``num_labels`` counts them where id2label is absent, ``problem_type`` says how they are
trained; ``export --format hf`` writes all three back and the task class's name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import ACTIVATION_NAMES, Rule, Source, _show, activation, number

TASKS = {"ForSequenceClassification": "sequence_classification", "ForTokenClassification": "token_classification",
         "ForQuestionAnswering": "answer_span"}
"""transformers' class suffix -> the spec head it imports as."""
PROBLEMS = {"single_label_classification": "single_label", "multi_label_classification": "multi_label",
            "regression": "regression"}
"""transformers' problem_type -> the sequence head's ``problem``."""


@dataclass(frozen=True)
class Pooled:
    """How a family's *ForSequenceClassification reads its first position before ``classifier``."""

    classifier: str = "classifier"
    """The tensor prefix of the last linear layer (RoBERTa's classifier.out_proj)."""
    dense: str | None = None
    """The tensor prefix of the head's dense layer; None: the base model's pooler (BERT)."""
    activation: str = "tanh"
    """The dense layer's activation (the head transform's)."""
    configured: bool = False
    """The activation is the configuration's pooler_hidden_act (DeBERTa-v2's ContextPooler),
    ``activation`` its default."""
    base_pooler: bool = True
    """Whether the family's *Model has a pooler (BERT's, RoBERTa's; not ELECTRA's or DeBERTa's)."""
    norm: str | None = None
    """The tensor prefix of a norm of the dense layer's output (ModernBERT's head.norm)."""
    answer: str = "qa_outputs"
    """The tensor prefix of the question-answering class's linear layer (ModernBERT's classifier)."""
    first_only: bool = False
    """The classifier reads the first position itself, through neither a pooler nor a dense
    layer (XLM's sequence_summary)."""


def with_task_heads(family: type) -> type:
    """``family`` with its task classes (``TaskHeads`` first in its bases), or ``family`` itself
    when it declares none; the task classes' base model sits under its masked LM's prefix."""
    pooled = family.task_heads
    if pooled is None:
        return family
    names, prefix = family.export_architecture.removesuffix("Model"), family.architectures[family.masked_lm]
    own = ("classifier.", pooled.answer + ".") + ((pooled.dense.split(".")[0] + ".",) if pooled.dense else ())
    return type(family.__name__, (family.task_class or TaskHeads, family), {
        "__module__": family.__module__, "__doc__": family.__doc__, "__qualname__": family.__qualname__,
        "architectures": family.architectures | {f"{names}{suffix}": prefix for suffix in TASKS},
        "heads": tuple(dict.fromkeys(family.heads + own)), "task_names": names})


def task_of(architecture: str) -> str | None:
    """The head kind ``architecture`` imports as, or None for a class without a task head."""
    return next((kind for suffix, kind in TASKS.items() if architecture.endswith(suffix)), None)


class TaskHeads:
    """Before an encoder family in its registered class: its task classes on top of its base model."""

    task_names: ClassVar[str]
    """The prefix of the family's class names (Bert, DebertaV2)."""

    @property
    def pooled(self) -> Pooled:
        return self.task_heads

    def spec_data(self, source: Source) -> dict:
        kind = task_of(source.architecture)
        if kind is None:
            return super().spec_data(source)
        data = super().spec_data(replace(source, architecture=self.export_architecture, names=None))
        head = {"kind": kind} | self._classes(kind, source.config, source.where)
        head |= self._reading(kind, source.config, source.where)
        pooler = kind == "sequence_classification" and self.pooled.dense is None and not self.pooled.first_only
        data = data | {"pooler": pooler, "head_transform": False, "output_bias": False, "head": head}
        if "embed_projection" in data:  # narrower embeddings: nothing goes back down to them (ALBERT, ELECTRA)
            data["embed_projection"] = data["embed_projection"] | {"out": None}
        return data

    @staticmethod
    def _classes(kind: str, c: dict, where: str) -> dict:
        """The head's classes, labels and problem from num_labels, id2label and problem_type (the
        speech families' classification heads read them too: ``wav2vec2.py``)."""
        labels = _labels(c, where)
        classes = len(labels) if labels is not None else number(c, "num_labels", where, default=2)
        if kind == "answer_span":
            if classes != 2:
                raise TfspecError(f"{where}: num_labels: {classes} is not supported for question answering; "
                                  "transformers splits qa_outputs into start and end logits, 2 labels")
            return {}
        least = 1 if kind == "sequence_classification" else 2
        if classes < least:
            raise TfspecError(f"{where}: num_labels must be at least {least}, got {classes}")
        default = [f"LABEL_{i}" for i in range(classes)]
        head = {"classes": classes} | ({"labels": labels} if labels not in (None, default) else {})
        problem = c.get("problem_type")
        if problem is not None:
            if kind != "sequence_classification" or problem not in PROBLEMS:
                raise TfspecError(f"{where}: problem_type: {_show(problem)} is not supported with "
                                  f"{kind.replace('_', ' ')}; tfspec reads {', '.join(PROBLEMS)} for sequence "
                                  "classification")
            head["problem"] = PROBLEMS[problem]
        return head

    def _reading(self, kind: str, c: dict, where: str) -> dict:
        """How the head reads the encoder's output: the sequence class its first position, through
        the family's dense layer if it has one; the token and span classes each position as it is."""
        return {"pooling": "first"} | self._transform(c, where) if kind == "sequence_classification" else {}

    def _transform(self, c: dict, where: str) -> dict:
        """The head's dense layer, if the family's has one: its activation fixed, or (DeBERTa-v2's
        ContextPooler) pooler_hidden_act, which reads pooler_hidden_size features: hidden_size."""
        pooled = self.pooled
        if pooled.dense is None:
            return {}
        if not pooled.configured:
            return {"transform": {"activation": pooled.activation}}
        size, hidden = c.get("pooler_hidden_size"), c.get("hidden_size")
        if size is not None and size != hidden:
            raise TfspecError(f"{where}: pooler_hidden_size ({_show(size)}) must equal hidden_size ({_show(hidden)}): "
                              "transformers' ContextPooler reads the hidden states and its classifier hidden_size")
        act = c.get("pooler_hidden_act", pooled.activation)
        return {"transform": {"activation": "tanh" if act == "tanh" else activation(c, "pooler_hidden_act", where,
                                                                                    pooled.activation)}}

    def rules(self, spec, architecture: str) -> list[Rule]:
        if spec.head is None:
            return super().rules(spec, architecture)
        rules = super().rules(spec, self.export_architecture)
        prefix = {"sequence_classification": self.pooled.classifier, "token_classification": "classifier",
                  "answer_span": self.pooled.answer}[spec.head.kind]
        transform = spec.head.transform
        if transform is not None:
            rules += [Rule(f"head.transform.{p}", (f"{self.pooled.dense}.{p}",))
                      for p in ("weight", "bias")[:1 + transform.bias]]
        if transform is not None and transform.norm:
            rules += [Rule(f"head.transform_norm.{p}", (f"{self.pooled.norm}.{p}",))
                      for p in ("weight", "bias")[:1 + spec.uses_norm_bias]]
        return rules + [Rule(f"classifier.{p}", (f"{prefix}.{p}",)) for p in ("weight", "bias")]

    def dropped(self, architecture: str) -> dict[str, str]:
        if task_of(architecture) is None:
            return super().dropped(architecture)
        dropped = super().dropped(self.export_architecture)
        if task_of(architecture) != "sequence_classification" or self.pooled.dense is not None:
            dropped = dropped | {"pooler.dense.*": f"a pooler (older transformers saved one), which {architecture} "
                                                   "does not read"}
        return dropped

    def structure(self, spec) -> str | None:
        head = spec.head
        if head is None:
            return super().structure(spec)
        if head.kind not in TASKS.values():
            return f"{self.title} has no {head.kind} head"
        return super().structure(self._body(spec))

    def _body(self, spec):
        """``spec`` as the family's *Model: no head, its pooler as that class has one or not."""
        return spec.model_copy(update={"head": None, "pooler": self.pooled.base_pooler})

    def architecture_for(self, spec) -> str:
        if spec.head is None:
            return super().architecture_for(spec)
        return self.task_names + next(suffix for suffix, kind in TASKS.items() if kind == spec.head.kind)

    def outputs(self, architecture: str) -> dict[str, str]:
        kind = task_of(architecture)
        if kind is None:
            return super().outputs(architecture)
        return {"logits": ("start_logits", "end_logits") if kind == "answer_span" else "logits"}

    def config(self, spec) -> dict:
        if spec.head is None:
            return super().config(spec)
        head = spec.head
        config = super().config(self._body(spec)) | {"architectures": [self.architecture_for(spec)]}
        names = head.labels or [f"LABEL_{i}" for i in range(head.classes)]
        config |= {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}
        problem = getattr(head, "problem", None)
        if problem is not None:
            config["problem_type"] = next(k for k, v in PROBLEMS.items() if v == problem)
        if self.pooled.configured and head.transform is not None:
            act = head.transform.activation
            config |= {"pooler_hidden_size": spec.d_model, "pooler_hidden_act": ACTIVATION_NAMES.get(act, act)}
        return config


def _labels(c: dict, where: str) -> list[str] | None:
    """id2label's names in id order, or None; refused unless its ids are 0 .. n-1 and agree with num_labels."""
    mapping = c.get("id2label")
    if mapping is None:
        return None
    if not isinstance(mapping, dict) or not mapping or not all(isinstance(v, str) for v in mapping.values()):
        raise TfspecError(f"{where}: id2label must map ids to label names, got {_show(mapping)}")
    try:
        ids = {int(k): v for k, v in mapping.items()}
    except ValueError:
        raise TfspecError(f"{where}: id2label's keys must be ids (0, 1, ...), got {_show(list(mapping))}") from None
    if sorted(ids) != list(range(len(ids))):
        raise TfspecError(f"{where}: id2label's ids must be 0 .. {len(ids) - 1}, got {sorted(ids)}")
    if c.get("num_labels") is not None and c["num_labels"] != len(ids):
        raise TfspecError(f"{where}: num_labels ({_show(c['num_labels'])}) and id2label ({len(ids)} labels) disagree")
    return [ids[i] for i in range(len(ids))]
