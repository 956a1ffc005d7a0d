"""Score modifiers: attention fields that transform a layer's logits after its position terms
and before the mask (Gemma 2's soft-cap). One module per modifier, found by scanning this
package (``tfspec.registry.discover``), declares everything the core knows of it: the field
(type, default, description), the check of its value against the layer, the IR ops whose
lowerings apply it, and where it applies among the others. ``Attention`` takes its fields from
this registry when it is defined, so a new modifier is this package's one module plus one per
backend (``backends/{torch,onnx}/modifiers``), and no list elsewhere names it."""

from __future__ import annotations

from typing import Any, ClassVar

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

    @classmethod
    def problem(cls, layer, value) -> str | None:
        """Why ``value`` cannot modify ``layer``'s scores (the field error's message), or None."""
        return None


def register(modifier: type[ScoreModifier]) -> type[ScoreModifier]:
    """Class decorator: record ``modifier`` under its field, refusing a second one for it."""
    return registrar(MODIFIERS, "score modifiers")(modifier.field)(modifier)


def ordered() -> list[type[ScoreModifier]]:
    """Every modifier of the package, in the order they apply (ties: by field, so the order
    never depends on which module was scanned first)."""
    discover(__name__)
    return sorted(MODIFIERS.values(), key=lambda m: (m.order, m.field))


def fields() -> dict[str, tuple[Any, Any]]:
    """The modifiers' pydantic field definitions, for ``create_model``."""
    return {m.field: (m.annotation, Field(m.default, description=m.description)) for m in ordered()}
