"""Score modifiers: attention fields that transform a layer's logits after its position terms
and before the mask (Gemma 2's soft-cap). One module per modifier, found by scanning this
package (``tfspec.registry.discover``), declares everything the core knows of it: the field
(type, default, description), the check of its value against the layer, the IR ops whose
lowerings apply it, and where it applies among the others. ``Attention`` takes its fields from
this registry when it is defined, so a new modifier is this package's one module plus one per
backend (``backends/{torch,onnx}/modifiers``), and no list elsewhere names it."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, ClassVar

from pydantic import Field

from tfspec.registry import discover, registrar

MODIFIERS: dict[str, type[ScoreModifier]] = {}
"""Each registered modifier by its field."""


class ScoreModifier:
    """What a modifier declares; the defaults are the safe answers (a field that is off unless
    set, applied by the ``attention`` op's lowerings only, no check beyond its type)."""

    field: ClassVar[str]
    """The attention field that sets it (its value reaches the backends as the node's attr)."""
    annotation: ClassVar[Any]
    """The field's type, bounds included (``Annotated[float, Field(gt=0)] | None``)."""
    description: ClassVar[str]
    """The field's description, as ``tfspec schema`` shows it."""
    default: ClassVar[Any] = None
    """The field's default; None leaves the scores as they are."""
    ops: ClassVar[tuple[str, ...]] = ("attention",)
    """The IR ops whose lowerings apply it: an attention kind lowering to another op refuses the
    field (``Attention._modifiers_honoured``) instead of silently ignoring it."""
    order: ClassVar[int] = 0
    """Where it applies among the modifiers a layer sets, lowest first: a bound on every logit
    (the soft-cap) goes last, so no later one can break it."""

    saved_scores: ClassVar[int] = 1
    """How many L x L tensors its backward pass keeps beside the softmax weights (tanh keeps
    its output), which ``report --train`` counts."""
    stage: ClassVar[str] = "logits"
    """Where it applies (``STAGES``): ``logits`` after the position terms, before the mask (the
    soft-cap); ``masked`` on the masked logits (top-k keeps the k largest visible ones);
    ``weighting`` turns the masked logits into the weights in place of the softmax (sigmoid, at
    most one per layer); ``weights`` on the weights before they multiply the values."""
    per_pair: ClassVar[bool] = False
    """Its FLOPs (``flops``, nonzero) grow with the scored pairs, so Table 1's complexity counts them."""
    reads_params: ClassVar[bool] = False
    """Its backends' ``modify`` takes the attention's PyTorch module (or the ONNX node) as its
    last argument, to read the parameters ``params`` declares."""

    @classmethod
    def problem(cls, layer, value) -> str | None:
        """Why ``value`` cannot modify ``layer``'s scores (the field error's message), or None."""
        return None

    @classmethod
    def is_set(cls, value) -> bool:
        """Whether ``value`` turns it on (None and False leave the scores as they are)."""
        return value is not None and value is not False

    @classmethod
    def params(cls, layer, value) -> dict:
        """IR parameters it adds to the attention node, role -> (shape, init), for a resolved layer."""
        return {}

    @classmethod
    def flops(cls, s, layer, value, pairs):
        """Forward FLOPs it adds (matrix products, 2 per multiply-add) in the symbols ``s``, over
        ``pairs`` scored query-key pairs: the layer's term named by the field, or 0 for none."""
        return 0


STAGES = ("logits", "masked", "weighting", "weights")
"""The stages of ``ScoreModifier.stage``, in the order the backends apply them."""


def register(modifier: type[ScoreModifier]) -> type[ScoreModifier]:
    """Class decorator: record ``modifier`` under its field, refusing a second one for it."""
    return registrar(MODIFIERS, "score modifiers")(modifier.field)(modifier)


def ordered() -> list[type[ScoreModifier]]:
    """Every modifier of the package, in the order they apply (ties: by field, so the order
    never depends on which module was scanned first)."""
    discover(__name__)
    return sorted(MODIFIERS.values(), key=lambda m: (m.order, m.field))


def set_on(values) -> list[type[ScoreModifier]]:
    """The modifiers that ``values`` (an attention layer, or an IR node's attrs dict) turn on, in order."""
    get = values.get if isinstance(values, dict) else lambda field: getattr(values, field, None)
    return [m for m in ordered() if m.is_set(get(m.field))]


def lowered(table: dict[str, Callable], attrs: dict, holder, stage: str) -> list[Callable]:
    """The backend functions of the modifiers an attention node's ``attrs`` set at ``stage``, in
    the order they apply: ``table`` (a backend's registry) maps each field to ``fn(value)``, which
    returns ``modify(...)``; one that reads parameters (``reads_params``) is handed ``holder`` (the
    PyTorch module or the ONNX node) after its arguments."""
    found = []
    for m in set_on(attrs):
        if m.stage == stage:
            modify = table[m.field](attrs[m.field])
            found.append(partial(_holding, modify, holder) if m.reads_params else modify)
    return found


def _holding(modify: Callable, holder, *args):
    return modify(*args, holder)


def fields() -> dict[str, tuple[Any, Any]]:
    """The modifiers' pydantic field definitions, for ``create_model``."""
    return {m.field: (m.annotation, Field(m.default, description=m.description)) for m in ordered()}
