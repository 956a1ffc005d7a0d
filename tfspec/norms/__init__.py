"""Norm kinds: what the spec's ``norm_type`` computes, one module per kind, found by scanning this
package (``tfspec.registry.discover``). A kind declares everything the core knows of it: its name
and place among ``norm_type``'s values, the IR op it lowers to (``tfspec/ir/ops``), the
parameters it declares, whether it has a bias unless ``norm_bias`` says otherwise, and its
capabilities (whether the lowerings that normalise inside their own op can apply it: attention's
``qk_norm``, DeBERTa's relative table, the feed-forward layer's ``inner_norm``, dynamic
hyper-connections). ``Spec.norm_type`` takes its values from this registry and
``LayerBuilder.norm`` asks the kind, so a new kind is this package's one module, its op's module
and one lowering per backend (``backends/torch/<op>.py``, ``backends/onnx/lower/<op>.py``)."""

from __future__ import annotations

from typing import ClassVar

from tfspec.registry import discover, registrar

NORMS: dict[str, type[NormKind]] = {}
"""Each registered norm kind by its name (``norm_type``'s value)."""


class NormKind:
    """What a norm kind declares; the defaults are the safe answers (no bias allowed, not
    applied inside attention, no checks beyond the type)."""

    name: ClassVar[str]
    """The value of ``norm_type`` that selects it."""
    order: ClassVar[int]
    """Its place among ``norm_type``'s values (the schema's enum)."""
    op: ClassVar[str]
    """The IR op it lowers to (``tfspec/ir/ops``)."""
    summary: ClassVar[str]
    """What it computes, for ``norm_type``'s description."""
    bias_default: ClassVar[bool] = False
    """Whether it has a learned shift when ``norm_bias`` is unset (LayerNorm's beta)."""
    takes_bias: ClassVar[bool] = False
    """``norm_bias: true`` is possible (RMSNorm and ScaleNorm subtract no mean and have no shift)."""
    inside_ops: ClassVar[bool] = False
    """The lowerings that normalise inside their own op in both backends implement it:
    attention's ``qk_norm`` and DeBERTa's ``table_norm``, the feed-forward layer's
    ``inner_norm``, dynamic hyper-connections' norm of the streams; a kind that says False refuses those fields instead of being silently
    replaced by another norm there."""

    @classmethod
    def params(cls, spec, width: int) -> dict:
        """The norm's parameters over ``width`` features: role -> (shape, init) (``LayerBuilder.op``)."""
        gain = {"weight": ((width,), "ones")} if spec.norm_gain else {}
        return gain | ({"bias": ((width,), "zeros")} if spec.uses_norm_bias else {})

    @classmethod
    def problem(cls, spec) -> tuple[str, str] | None:
        """(field, message) saying why ``spec``'s norm fields do not fit this kind, or None."""
        if spec.norm_bias and not cls.takes_bias:
            return "norm_bias", (f"norm_type {cls.name} has no bias: drop norm_bias or use a norm_type with "
                                 "one (layer, tanh)")
        return None


def register(kind: type[NormKind]) -> type[NormKind]:
    """Class decorator: record ``kind`` under its name, refusing a second one for it."""
    return registrar(NORMS, "norm kinds")(kind.name)(kind)


def ordered() -> list[type[NormKind]]:
    """Every norm kind of the package, in ``norm_type``'s order (ties: by name)."""
    discover(__name__)
    return sorted(NORMS.values(), key=lambda k: (k.order, k.name))


def names() -> tuple[str, ...]:
    """``norm_type``'s values."""
    return tuple(k.name for k in ordered())


def description() -> str:
    """``norm_type``'s description: each kind's summary."""
    return "How every norm normalises (tfspec/norms):\n" + "\n".join(f"{k.name}: {k.summary}" for k in ordered())
