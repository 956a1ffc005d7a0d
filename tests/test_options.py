"""Options models (tfspec.options): every field's bound refused from Python and from the command
line in the same words, driven by the fields, so a new field is covered without new test code.

The bounds are read from the fields' declared constraints (pydantic's ``annotated_types``), the
refusals from two independent doors: the model's constructor and ``tfspec.cli.main``. The flags
``tfspec serve`` documents (docs/serve.md's table) keep their names and defaults."""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import typing
from pathlib import Path

import annotated_types
import pytest
from pydantic import ValidationError

from tfspec.cli import fields, main, parser
from tfspec.errors import TfspecError
from tfspec.options import Options, field_type
from tfspec.search import Sampling, SearchOptions
from tfspec.serve.config import Listening, ServeConfig

CLI = parser()  # every command's module imported: every options model the CLI builds from is defined


def models() -> list[type]:
    found, todo = [], list(Options.__subclasses__())
    while todo:
        found.append(todo.pop())
        todo += found[-1].__subclasses__()
    return sorted(found, key=lambda m: m.__qualname__)


def flags() -> dict[tuple[type, str], list[tuple[str, str]]]:
    """(model, field) -> the (command, flag) pairs whose parser is that field's."""
    commands = next(a for a in CLI._actions if isinstance(a, argparse._SubParsersAction)).choices
    found = {}
    for command, sub in commands.items():
        for action in sub._actions:
            field = getattr(action.type, "field", None)
            if field is not None:
                found.setdefault(field, []).append((command, action.option_strings[-1]))
    return found


FLAGS = flags()
FIELDS = [(model, name) for model in models() for name in model.__pydantic_fields__]


def refused(info) -> list:
    """Values a field's declared type refuses: just past each bound, text that is not a
    number, a near miss of a fixed value."""
    kind = field_type(info)
    base, *meta = typing.get_args(kind) if typing.get_origin(kind) is typing.Annotated else (kind,)
    meta = [m for item in meta for m in (item.metadata if hasattr(item, "metadata") else [item])]
    bad = []
    for m in meta:
        bad += [m.ge - 1] if isinstance(m, annotated_types.Ge) else [m.gt] if isinstance(m, annotated_types.Gt) else []
        bad += [m.le + 1] if isinstance(m, annotated_types.Le) else [m.lt] if isinstance(m, annotated_types.Lt) else []
    if base in (int, float):
        bad += ["x"] + ([math.nan] if base is float else [])  # options are finite (SpecModel's rules)
    if typing.get_origin(base) is typing.Literal:
        bad += [str(typing.get_args(base)[0])[:-1], "?"]
    return bad


def python_refusal(model, name, value) -> str:
    required = {n: "x" for n, info in model.__pydantic_fields__.items() if info.is_required() and n != name}
    with pytest.raises(ValidationError) as info:
        model(**required, **{name: value})
    return next(e["msg"] for e in info.value.errors() if e["loc"] == (name,))


@pytest.mark.parametrize("model,name", FIELDS, ids=[f"{m.__name__}.{n}" for m, n in FIELDS])
def test_each_bound_is_refused_from_python_and_the_cli_in_the_same_words(model, name, capsys):
    info = model.__pydantic_fields__[name]
    if not refused(info):
        pytest.skip(f"{name} has no bound")  # a path, a host, a nested model
    for value in refused(info):
        words = python_refusal(model, name, value)
        assert str(value)[:40] in words or repr(value)[:40] in words  # the message quotes what was given
        for command, flag in FLAGS.get((model, name), []):
            with pytest.raises(SystemExit) as exit:
                main([command, flag, str(value)])
            assert exit.value.code == 2
            assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: argument {flag}: {words}")


@pytest.mark.parametrize("model", [ServeConfig, Listening, Sampling])
def test_every_field_of_a_command_s_options_is_a_flag(model):
    """The commands built from these models (serve, generate) expose each field with a default."""
    fields_ = model.__pydantic_fields__
    assert [n for n, info in fields_.items() if not info.is_required() and (model, n) not in FLAGS] == []


def test_the_issue_s_examples_are_refused():
    with pytest.raises(ValidationError, match=r"batching\n  must be one of continuous, static, got 'statik' "
                                              r"\(did you mean 'static'\?\)"):
        ServeConfig("x", batching="statik")
    with pytest.raises(ValidationError, match="max_queue\n  must be between 1 and"):
        ServeConfig("x", max_queue=-1)
    for zero in (0, 0.0):
        with pytest.raises(ValidationError, match="temperature\n  must be a finite number more than 0"):
            Sampling(temperature=zero)


def test_unknown_keywords_name_the_closest_field():
    with pytest.raises(ValidationError, match=r"unknown field 'temprature' \(did you mean 'temperature'\?\)"):
        Sampling(temprature=0.7)
    with pytest.raises(ValidationError, match="unknown field 'colour'; known fields: host, port, workers, grace"):
        Listening(colour="red")


def test_sampling_with_a_beam_is_refused_saying_the_fix():
    """search() draws only at beam 1: a beam search given sampling silently ignored it."""
    with pytest.raises(ValidationError, match=r"sampling draws one token per step: it needs beam 1, not 4 \(set beam"):
        SearchOptions(sampling=Sampling())
    assert SearchOptions(beam=1, sampling=Sampling()).sampling == Sampling()
    with pytest.raises(TfspecError, match=r"^sampling draws one token per step"):
        fields.from_args(SearchOptions, argparse.Namespace(beam=4), sampling=Sampling())


def test_options_are_frozen_hashable_and_replace_validates():
    options = SearchOptions(beam=1, sampling=Sampling(seed=3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.beam = 2
    assert hash(options) == hash(SearchOptions(beam=1, sampling=Sampling(seed=3)))  # a batcher's key
    assert dataclasses.replace(options, sampling=None) == SearchOptions(beam=1)
    with pytest.raises(ValidationError, match="must be between 1 and 1,024, got 0"):
        dataclasses.replace(options, beam=0)


def documented_flags() -> dict[str, str]:
    """docs/serve.md's table of `tfspec serve` flags: flag -> its documented default."""
    text = (Path(__file__).parents[1] / "docs" / "serve.md").read_text()
    return dict(re.findall(r"^\| `(--[a-z-]+)[^`]*` \| ([^|]+?) \|", text, re.M))


def test_serve_flags_keep_their_documented_names_and_defaults():
    serve = next(a for a in CLI._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    defaults = {a.option_strings[-1]: a.default for a in serve._actions if a.option_strings and a.dest != "help"}
    documented = documented_flags()
    assert sorted(documented) == sorted(defaults)  # every flag documented, every documented flag there
    for flag, default in defaults.items():
        if default is not None:  # None: the description says what it means ("all cores")
            assert str(default) == documented[flag] or float(default) == float(documented[flag]), flag
