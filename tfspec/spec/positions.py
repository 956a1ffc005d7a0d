"""How positions enter a model (§3.5 and its successors): the ``positional`` field of a spec.
Its ``kind`` values and each kind's fields and checks come from the kinds' own modules
(``tfspec.positions``), so a new kind is a new module there, not an edit here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, create_model, model_validator

from tfspec import positions as kinds
from tfspec.spec.base import SpecModel, field_error
from tfspec.spec.bounds import Positions


class PositionalCore(SpecModel):
    """How positions enter the model (§3.5): the fields every kind reads; ``Positional`` adds
    ``kind`` and the kinds' own fields from their registry."""

    kind: str = "sinusoidal"
    """The kind's name; ``Positional`` narrows it to the registered names (first, as dumps show it)."""
    max_len: Positions = 1024
    """Longest sequence the model accepts; rows of the learned table."""
    max_distance: Positions = 16
    """relative: distances are clipped to [-max_distance, max_distance] (Shaw et al.'s k);
    relative_bias: distances from max_distance on share the last bucket (T5: 128)."""

    @property
    def definition(self) -> type[kinds.PositionKind]:
        """The registered kind: what callers ask instead of comparing its name."""
        return kinds.KINDS[self.kind]

    @property
    def table_rows(self) -> int | None:
        """Positions an embedding table has rows for (sinusoidal, learned): the longest input
        those kinds can read; None where no table bounds the length."""
        return self.max_len if self.definition.embedded else None

    @property
    def limit(self) -> int | None:
        """The longest sequence any path runs, its last token included (as transformers'
        ``max_length`` counts): max_len for every kind but none, which leaves length unbounded.
        The one rule of the Python search, generate.onnx, ``serve`` and the JavaScript clients
        (tfspec.json's ``position_limit``); ``room`` is what it leaves a search."""
        return self.max_len if self.definition.bounded else None

    def room(self, fed):
        """Most tokens a search may add after ``fed`` tokens (the decoder's start token and any
        prompt; an int or an array): ``limit - fed``, None where length is unbounded."""
        return None if self.limit is None else self.limit - fed

    @property
    def depends_on_length(self) -> bool:
        """Whether a position's encoding depends on the length the call reaches (dynamic NTK
        and LongRoPE scalings pick their frequencies per call), so a row's output depends on
        the rows it is batched with: refused for ragged batching (``Graph.masks_padding``)."""
        return self.definition.depends_on_length(self)

    @property
    def reads_cache_indices(self) -> bool:
        """Whether attention reads positions as cache columns (the distance j - i between key
        and query columns) rather than each row's own position ids: a cache holding padding
        inside its rows (onnxruntime-genai's) then shifts the distances."""
        return self.definition.reads_cache_indices

    @property
    def in_attention(self) -> bool:
        """Positions enter through self-attention rather than the embeddings."""
        return self.definition.in_attention

    @property
    def rows(self) -> int:
        """Rows of the table: the offset's unused ones, then one per position."""
        return self.max_len + self.offset

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"kind": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _kind_only(self) -> PositionalCore:
        """A field another kind owns, set under this one, is refused (it would be ignored);
        then the kind checks its own fields."""
        for field, owners in kinds.owners().items():
            if self.kind not in owners and getattr(self, field) != type(self).model_fields[field].default:
                raise field_error(field, f"{field} shapes {' or '.join(owners)} positions, but kind is {self.kind}: "
                                  f"remove {field} or set kind: {owners[0]}")
        self.definition.check(self)
        return self


def _kind_field() -> tuple[Any, Any]:
    """``kind``: one value per registered kind, described by their summaries."""
    registered = kinds.ordered()
    names = tuple(kind.name for kind in registered)
    described = "; ".join(f"{kind.name}: {kind.summary}" for kind in registered) + "."
    return Literal[names], Field("sinusoidal", description=described)


Positional = create_model("Positional", __base__=PositionalCore, __module__=__name__,
                          __doc__="How positions enter the model (§3.5).", kind=_kind_field(),
                          **{name: spec for kind in kinds.ordered() for name, spec in kind.fields.items()})
"""The spec's ``positional`` (and a layer's ``positions``): the core's fields, ``kind`` and the
fields of every registered kind (``tfspec.positions``)."""
