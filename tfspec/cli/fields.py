"""Command-line flags generated from the fields of an options model (``tfspec.options``).

As vLLM builds its command line from ``EngineArgs``: the flag from the field's name, its default
from the field's, its help from the first paragraph of the field's description, and its parser
from the field's type, that is the field's own validator: a bound is written once, and
``--max-queue 0`` is refused in the words ``ServeConfig(d, max_queue=0)`` is."""

from __future__ import annotations

import argparse
import functools
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import TypeAdapter, ValidationError

from tfspec.errors import TfspecError
from tfspec.options import field_type, in_words


def argument(kind: Any, field: tuple[type, str] | None = None):
    """An argparse type reading text as ``kind`` (an annotated type: ``tfspec.options.whole``,
    ...), refusing in the words an options model refuses a value of that type. ``field``
    (model, name): the field it parses, for whoever reads the parser. The validator is built at
    the first flag read (~0.2 ms each: a command's parser has dozens and reads a few)."""
    @functools.cache
    def adapter() -> TypeAdapter:
        return TypeAdapter(kind)

    def parse(text: str):
        try:
            return adapter().validate_python(text)
        except ValidationError as e:
            raise argparse.ArgumentTypeError(in_words(e.errors()[0], kind)) from None
    parse.field = field
    return parse


def field_argument(model: type, name: str):
    """The argparse type of ``model``'s field ``name``."""
    return argument(field_type(model.__pydantic_fields__[name]), (model, name))


def flag(name: str) -> str:
    """The flag of field ``name``: ``max_queue`` is ``--max-queue``."""
    return "--" + name.replace("_", "-")


def add_fields(parser: argparse.ArgumentParser, model: type, unset: bool = False, only: Iterable[str] | None = None,
               flags: Mapping[str, str] | None = None, defaults: Mapping[str, str] | None = None) -> None:
    """One flag per field of ``model`` that has a default (``max_queue``: ``--max-queue``), its
    value kept under the field's name; a boolean whose default is False is a switch
    (``store_true``). ``unset``: a flag not given is None (the help still shows the field's
    default), for commands that ask which were given. ``only``: these fields alone, in this
    order (the others are not the command's to set). ``flags``: a field's established flag
    where it is not its name (``{"sharded": "--sharded-checkpoints"}``). ``defaults``: the words
    of a default that depends on other flags (``{"steps": "1000; 100000 with --max-minutes"}``):
    that flag is None when not given, and the command decides."""
    known, flags, defaults = model.__pydantic_fields__, flags or {}, defaults or {}
    for name in known if only is None else only:
        info = known[name]
        if info.is_required():
            continue
        option, help_ = flags.get(name, flag(name)), _help(info, defaults.get(name))
        if info.default is False and field_type(info) is bool:
            parser.add_argument(option, dest=name, action="store_true", help=help_)
        else:
            default = None if unset or name in defaults else info.default
            parser.add_argument(option, dest=name, type=field_argument(model, name), default=default,
                                metavar=_metavar(field_type(info)), help=help_)


def from_args(model: type, args: argparse.Namespace, **given):
    """``model`` from the flags ``add_fields`` added (those not None) and the ``given`` fields;
    what it refuses (a cross-field check, a given field) as error lines, a flag's named as such."""
    values = {name: getattr(args, name) for name in model.__pydantic_fields__
              if name not in given and getattr(args, name, None) is not None}
    try:
        return model(**given, **values)
    except ValidationError as e:
        raise TfspecError("\n".join(_refusal(error, values) for error in e.errors(include_url=False))) from None


def _refusal(error: dict, flags) -> str:
    """One error line: a cross-field check's message alone (it names its fields), a field's
    after its flag or its name."""
    if error["type"] == "spec_field" or not error["loc"]:
        return error["msg"]
    name = ".".join(map(str, error["loc"]))
    return f"{flag(name) if name in flags else name}: {error['msg']}"


def _metavar(kind: Any) -> str | None:
    """``{a,b}`` for a field of fixed values, as argparse writes its choices; PATH for a path."""
    inner = typing.get_args(kind)[0] if typing.get_origin(kind) is Annotated else kind
    if inner is Path:
        return "PATH"
    return "{" + ",".join(map(str, typing.get_args(inner))) + "}" if typing.get_origin(inner) is Literal else None


def _help(info, default_words: str | None = None) -> str:
    """The description's first paragraph on one line, as a clause (lower-case first letter, no
    full stop), with the default where there is one (None: the description says what it means;
    False: a switch, off unless given), or ``default_words`` where the command decides it; '%'
    escaped for argparse's formatting."""
    text = " ".join((info.description or "").split("\n\n")[0].split()).rstrip(".")
    if text[:2].istitle():
        text = text[0].lower() + text[1:]
    text = text.replace("%", "%%")
    if default_words is not None:
        return f"{text} (default {default_words})"
    if info.default is None or info.default is False:
        return text
    default = f"{info.default:g}" if isinstance(info.default, float) else info.default
    return f"{text} (default {default})"
