"""Options: the configurations that are not specs (serving, search, training, export), validated as the spec is.

Each is a frozen pydantic dataclass under ``SpecModel``'s rules (unknown keys refused with the
closest known one, no NaN or infinity, field descriptions from attribute docstrings), its bounds
declared once in the field's type (``whole``, ``number``, ``choice``: pydantic's own constraints,
checked in Rust). A refusal is worded as tfspec's command line has always worded it
(``in_words``): the command line is generated from the fields (``tfspec.cli.fields``) and reads
each flag with the field's type, so ``ServeConfig(d, max_queue=0)`` and ``tfspec serve d
--max-queue 0`` are refused in the same words. Dataclasses rather than ``SpecModel`` itself:
callers pass a server's directory positionally (``ServeConfig(directory)``) and derive options
with ``dataclasses.replace``, which validates again.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic.dataclasses import dataclass
from pydantic_core import PydanticCustomError

from tfspec.spec.base import SpecModel, did_you_mean
from tfspec.spec.bounds import MAX_POSITIONS

RULES = ConfigDict(**{key: value for key, value in SpecModel.model_config.items() if key != "frozen"})
"""The spec's rules; frozen is the decorator's (pydantic warns when both set it)."""
RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than_equal", "finite_number"})


def whole(low: int, high: int = MAX_POSITIONS):
    """An int in [low, high]."""
    return Annotated[int, Field(ge=low, le=high)]


def number(low: float, high: float, low_open: bool = False):
    """A finite float in [low, high] (or (low, high] with ``low_open``)."""
    low_bound = Field(gt=low) if low_open else Field(ge=low)
    return Annotated[float, low_bound, Field(le=high, allow_inf_nan=False)]


def choice(*values: str):
    """One of ``values``."""
    return Literal[values]


def one_of(*values: int):
    """One of the whole numbers ``values``, read from text as the command line gives it."""
    return Annotated[Literal[values], BeforeValidator(lambda v: int(v) if isinstance(v, str) and v.isdigit() else v)]


THREADS = whole(1, 1024)
"""Threads of a runtime (onnxruntime, torch)."""


def field_type(info) -> Any:
    """The type a field's values are checked against, None left out (a value given is not None;
    None is a default): its annotation with its constraints (``info``: a ``FieldInfo``)."""
    kind = info.annotation
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        kind, = [member for member in typing.get_args(kind) if member is not type(None)]
    return Annotated[(kind, *info.metadata)] if info.metadata else kind


def declared(kind: Any) -> tuple[Any, dict[str, Any]]:
    """The base type of a declared type (``Annotated`` taken off) and its bounds (``ge``, ``gt``, ``le``)."""
    if typing.get_origin(kind) is not Annotated:
        return kind, {}
    base, *metadata = typing.get_args(kind)
    base, bounds = declared(base)
    for item in metadata:
        for limit in getattr(item, "metadata", [item]):  # a FieldInfo holds its constraints
            if isinstance(limit, (annotated_types.Ge, annotated_types.Gt, annotated_types.Le)):
                name = dataclasses.fields(limit)[0].name  # ge, gt or le
                bounds[name] = getattr(limit, name)
    return base, bounds


def in_words(error: dict, kind: Any) -> str:
    """pydantic's ``error`` about a value of the declared type ``kind``, in tfspec's words: what
    is allowed, what was given (cut to 40 characters), and a near miss named."""
    base, bounds = declared(kind)
    value, out_of_range = error["input"], error["type"] in RANGE_ERRORS
    if typing.get_origin(base) is Literal:
        allowed = typing.get_args(base)
        words = tuple(map(str, allowed))
        return f"must be one of {', '.join(words)}, got {_quoted(value)}{did_you_mean(str(value), words)}"
    if base is int:
        return (f"must be between {bounds['ge']:,} and {bounds['le']:,}, got {_typed(value)}" if out_of_range
                else f"expected a whole number, got {_quoted(value)}")
    if base is float:
        least = f"more than {bounds['gt']:g}" if "gt" in bounds else f"at least {bounds['ge']:g}"
        return (f"must be a finite number {least} and at most {bounds['le']:g}, got {_typed(value)}" if out_of_range
                else f"expected a number, got {_quoted(value)}")
    return error["msg"]


def _typed(value: Any) -> str:
    """A value out of range as a message quotes it: what was typed."""
    return value[:40] if isinstance(value, str) else repr(value)[:40]


def _quoted(value: Any) -> str:
    """A value of the wrong type as a message quotes it: in quotes when it was text."""
    return repr(value[:40]) if isinstance(value, str) else repr(value)[:40]


@dataclass(frozen=True, config=RULES)
class Options:
    """The base of every options model: its refusals in tfspec's words (one Python call per
    construction, the checks themselves in pydantic's Rust core: ~1 us over a plain dataclass)."""

    @model_validator(mode="wrap")
    @classmethod
    def _in_words(cls, data: Any, handler) -> Any:
        try:
            return handler(data)
        except ValidationError as e:
            raise ValidationError.from_exception_data(cls.__name__, [
                {"type": PydanticCustomError(error["type"], _reworded(cls, error)), "loc": error["loc"],
                 "input": error["input"]} for error in e.errors(include_url=False)]) from None


def _reworded(model: type, error: dict) -> str:
    """One refusal of ``model`` in tfspec's words: an unknown keyword with the closest field, a
    field's value by its declared type; a nested model's and a cross-field check's as they are."""
    known = model.__pydantic_fields__
    if error["type"] == "unexpected_keyword_argument":
        key = error["loc"][0]
        return f"unknown field {key!r}{did_you_mean(key, known) or '; known fields: ' + ', '.join(known)}"
    if len(error["loc"]) != 1 or error["loc"][0] not in known:
        return error["msg"]
    return in_words(error, field_type(known[error["loc"][0]]))


def options(cls: type) -> type:
    """The decorator of an ``Options`` subclass (pydantic dataclasses are not inherited): a
    field that a subclass inherits, or redeclares without a docstring, keeps its base's
    description (pydantic reads attribute docstrings from the class's own source only)."""
    model = dataclass(frozen=True, config=RULES)(cls)
    for base in cls.__mro__[1:]:
        for name, inherited in getattr(base, "__pydantic_fields__", {}).items():
            info = model.__pydantic_fields__.get(name)
            if info is not None and info.description is None:
                info.description = inherited.description
    return model
