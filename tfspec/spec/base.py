"""The base every spec model derives from: frozen, documented, and strict about keys.

Unknown keys are errors, never silently dropped (a typo in a spec must not train the wrong
model), and the error suggests the closest known key.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError


def did_you_mean(word: str, choices) -> str:
    """' (did you mean 'x'?)' when a choice is close to ``word``, else ''."""
    if not isinstance(word, str) or len(word) > 100:
        return ""
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def field_error(field: str, message: str) -> PydanticCustomError:
    """A cross-field error pinned to ``field`` (a dotted path below the model, list indices as
    numbers: ``decoder.block.0``) so the message can name its path and line."""
    return PydanticCustomError("spec_field", "{message}", {"field": field, "message": message})


class SpecModel(BaseModel):
    """Frozen, forbids unknown keys and non-finite floats, takes field descriptions from attribute
    docstrings."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = set(cls.model_fields)
            for key in data:
                if key not in known:
                    hint = did_you_mean(key, known) or f"; known fields: {', '.join(sorted(known))}"
                    raise PydanticCustomError("unknown_field", "unknown field{hint}",
                                              {"field": str(key), "hint": hint})
        return data
