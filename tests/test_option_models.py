"""The training, fine-tuning, CTC and export options models (issue 54): each bound refused from
Python and from the command line in the same words, unknown keywords refused with the closest
field named, the export's flag conflicts checked once for the command and the Python API, and
the flags the commands always had keeping their names, defaults and meaning.

The bounds are read from the fields' declared constraints (``annotated_types``), so a new field
is covered without new test code; the flags, defaults and conflict messages expected are those
of the hand-written parsers these models replaced (the command lines the docs show)."""

from __future__ import annotations

import argparse
import math
import typing

import annotated_types
import pytest
from pydantic import ValidationError

from tfspec.cli import main, parser
from tfspec.cli.fields import from_args
from tfspec.errors import TfspecError
from tfspec.export_options import ExportOptions
from tfspec.options import field_type
from tfspec.train_options import FinetuneConfig, LinesConfig, Loop, TrainConfig

COMMAND = {Loop: "train", TrainConfig: "train", LinesConfig: "train", FinetuneConfig: "finetune",
           ExportOptions: "export"}
"""The command whose flags set each model's fields (digit-line runs read `tfspec train`'s)."""
CLI = parser(["train", "finetune", "export"])
SUBPARSERS = next(a for a in CLI._actions if isinstance(a, argparse._SubParsersAction)).choices


def flag_of(command: str, name: str) -> str | None:
    """The flag of ``command`` whose value is kept under ``name``, if it has one."""
    return next((a.option_strings[-1] for a in SUBPARSERS[command]._actions if a.dest == name and a.option_strings),
                None)


def refused(info) -> list:
    """Values a field's declared type refuses: just past each bound, text that is not a number,
    NaN for a float, a near miss and a stranger for a fixed value."""
    kind = field_type(info)
    base, *meta = typing.get_args(kind) if typing.get_origin(kind) is typing.Annotated else (kind,)
    limits = [m for item in meta for m in getattr(item, "metadata", [item])]
    bad = [m.ge - 1 for m in limits if isinstance(m, annotated_types.Ge)]
    bad += [m.gt for m in limits if isinstance(m, annotated_types.Gt)]
    bad += [m.le * 2 if base is float else m.le + 1 for m in limits if isinstance(m, annotated_types.Le)]
    if base in (int, float):
        bad += ["x", *([math.nan] if base is float else [])]
    if typing.get_origin(base) is typing.Literal:
        bad += [str(typing.get_args(base)[0])[:-1], "?"]
    return bad


BOUNDED = [(model, name, value) for model in COMMAND for name, info in model.__pydantic_fields__.items()
           for value in refused(info)]


def python_words(model, name, value) -> str:
    given = {"steps": 1} if model is Loop and name != "steps" else {}  # Loop's one required field
    with pytest.raises(ValidationError) as info:
        model(**given, **{name: value})
    return next(e["msg"] for e in info.value.errors() if e["loc"] == (name,))


@pytest.mark.parametrize("model,name,value", BOUNDED, ids=[f"{m.__name__}.{n}={v!r}" for m, n, v in BOUNDED])
def test_each_bound_is_refused_from_python_and_the_cli_in_the_same_words(model, name, value, capsys):
    words = python_words(model, name, value)
    assert str(value)[:40] in words or repr(value)[:40] in words  # the message quotes what was given
    flag = flag_of(COMMAND[model], name)
    if flag is None:
        pytest.skip(f"{model.__name__}.{name} is not a flag of tfspec {COMMAND[model]}")
    with pytest.raises(SystemExit) as exit_:
        main([COMMAND[model], flag, str(value)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: argument {flag}: {words}")


def test_the_models_have_bounds_to_test():
    """The table above is not vacuous: every numeric or fixed-choice field of these models is bounded."""
    fields = {(m, n) for m, n, _ in BOUNDED}
    assert (TrainConfig, "lr_scale") in fields and (LinesConfig, "batch") in fields
    assert (FinetuneConfig, "weight_decay") in fields and (ExportOptions, "opset") in fields
    for model in COMMAND:
        for name, info in model.__pydantic_fields__.items():
            assert info.description, f"{model.__name__}.{name} has no docstring for its help"
            if typing.get_origin(field_type(info)) is typing.Annotated or field_type(info) in (int, float):
                assert (model, name) in fields, f"{model.__name__}.{name} is a number without bounds"


NAMES = [(model, name) for model in COMMAND for name in model.__pydantic_fields__]


@pytest.mark.parametrize("model,name", NAMES, ids=[f"{m.__name__}.{n}" for m, n in NAMES])
def test_a_misspelt_keyword_names_the_field_meant(model, name):
    typo = name[:-1] if len(name) > 4 else name + "s"  # a letter lost, or one too many
    with pytest.raises(ValidationError, match=rf"unknown field '{typo}' \(did you mean '{name}'\?\)"):
        model(**({"steps": 1} if model is Loop else {}), **{typo: 1})


def test_a_keyword_far_from_every_field_lists_them():
    with pytest.raises(ValidationError, match="unknown field 'colour'; known fields: steps, batch, warmup, "):
        LinesConfig(colour=1)


TRAIN = {"--steps": None, "--batch-tokens": 4096, "--accum": 1, "--shard": "ddp", "--checkpoint-activations": False,
         "--compile": False, "--warmup": None, "--lr-scale": 1.0, "--seed": 0, "--save-every": 500, "--keep": 5,
         "--log-every": 10, "--max-minutes": 0, "--sharded-checkpoints": False}
FINETUNE = {"--epochs": 3, "--batch": 32, "--lr": 5e-5, "--warmup": 0.1, "--seed": 0, "--max-minutes": 0}
EXPORT = {"--format": "onnx", "--opset": None, "--fp16": False, "--int8": False, "--int4": False, "--stream": False,
          "--static-cache": False, "--generate": False, "--fused": False, "--int4-block": 32,
          "--int4-zero-points": False, "--int4-embeddings": "int8", "--int4-calibrate": None}
"""The flags the hand-written parsers had, with their defaults (None: the command decides)."""


@pytest.mark.parametrize("command,established", [("train", TRAIN), ("finetune", FINETUNE), ("export", EXPORT)])
def test_established_flags_keep_their_names_and_defaults(command, established):
    actions = {a.option_strings[-1]: a for a in SUBPARSERS[command]._actions if a.option_strings}
    for flag, default in established.items():
        assert flag in actions, flag
        assert actions[flag].default == default, flag
        assert actions[flag].help and "%" not in actions[flag].help.replace("%%", ""), flag  # from the docstring


def parse(*words) -> argparse.Namespace:
    return CLI.parse_args([str(w) for w in words])


def test_train_flags_build_the_train_config(tmp_path):
    from tfspec.cli.train import train_config

    out = ["train", "tiny", "--out", tmp_path]
    assert train_config(parse(*out)) == TrainConfig()  # steps 1000, warm-up 4000: eq. 3's defaults
    assert train_config(parse(*out, "--max-minutes", 5)).steps == 100_000  # the clock ends the run
    assert train_config(parse(*out, "--max-minutes", 5, "--steps", 7)).steps == 7
    given = train_config(parse(*out, "--sharded-checkpoints", "--shard", "fsdp", "--accum", 3, "--lr-scale", 2,
                               "--checkpoint-activations"))
    assert given == TrainConfig(sharded=True, shard="fsdp", accum=3, lr_scale=2.0, checkpoint_activations=True)
    lines = from_args(LinesConfig, parse(*out, "--keep", 3), max_minutes=1.5)  # what a digit-line run reads
    assert (lines.steps, lines.warmup, lines.keep, lines.max_minutes) == (4000, 400, 3, 1.5)


def test_finetune_flags_build_the_finetune_config(tmp_path):
    args = parse("finetune", "bert", "data", "-o", tmp_path, "--lr", "1e-3", "--weight-decay", 0, "--clip", 0.5)
    assert from_args(FinetuneConfig, args) == FinetuneConfig(lr=1e-3, weight_decay=0.0, clip=0.5)


CONFLICTS = [
    ({"format": "hf", "opset": 18}, "--opset applies to --format onnx; a Hugging Face checkpoint keeps float weights "
                                    "and has no graphs"),
    ({"format": "hf", "fused": True}, "--fused applies to --format onnx; a Hugging Face checkpoint keeps float "
                                      "weights and has no graphs"),
    ({"format": "genai", "int8": True}, "--int8 applies to --format onnx; --format genai writes the graphs "
                                        "onnxruntime-genai drive"),
    ({"format": "optimum", "static_cache": True}, "--static-cache applies to --format onnx; --format optimum writes "
                                                  "the graphs optimum and transformers.js drive"),
    ({"format": "optimum", "int8": True, "fp16": True}, "--int8 quantises the float32 graphs' weights: leave out "
                                                        "--fp16"),
    ({"int4": True, "int8": True}, "--int4 writes float32 graphs whose projections are MatMulNBits: leave out --int8"),
    ({"int4": True, "static_cache": True}, "--int4 writes float32 graphs whose projections are MatMulNBits: leave out "
                                           "--static-cache"),
    ({"format": "genai", "tokenizer": "t.model"}, "--tokenizer applies to --format onnx, not genai"),
    ({"format": "optimum", "shortlist": "corpus"}, "--shortlist applies to --format onnx, not optimum"),
    ({"fused": True, "fp16": True}, "--fused emits onnxruntime's fused CPU operators into float32 graphs: leave out "
                                    "--fp16"),
    ({"fused": True, "generate": True}, "--fused: generate.onnx is standard ONNX operators only, for every runtime: "
                                        "leave out --generate (or export it separately)"),
    ({"int4_block": 64}, "--int4-block sets how --int4 quantises: add --int4"),
    ({"int8": True, "int4_embeddings": "int4"}, "--int4-embeddings sets how --int4 quantises: add --int4"),
]
"""Combinations no export writes, in the words `tfspec export` refused them before ExportOptions."""


def cli_words(options: dict) -> list[str]:
    words = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        words += [flag] if value is True else [flag, str(value)]
    return words


@pytest.mark.parametrize("options,words", CONFLICTS, ids=["+".join(o) for o, _ in CONFLICTS])
def test_export_conflicts_are_refused_once_in_the_same_words(options, words, tmp_path, capsys):
    with pytest.raises(ValidationError) as info:
        ExportOptions(**options)
    assert [e["msg"] for e in info.value.errors()] == [words]
    code = main(["export", "tiny", "-o", str(tmp_path / "out"), *cli_words(options)])
    assert code == 2 and capsys.readouterr().err == f"error: {words}\n"
    assert not (tmp_path / "out").exists()  # refused before anything was read or written


@pytest.mark.parametrize("options,words", [c for c in CONFLICTS if set(c[0]) <= {"fp16", "int8", "fused", "generate"}])
def test_the_onnx_backend_refuses_what_the_command_refuses(options, words):
    """``backends.onnx.export`` and the streamed route check the same model (no second list)."""
    pytest.importorskip("onnx")
    from tfspec.backends.onnx.exporter import refuse_conflicts

    flags = {"fp16": False, "int8": False, "fused": False, "generate": False} | options
    with pytest.raises(TfspecError) as info:
        refuse_conflicts(**flags)
    assert str(info.value) == words


def test_combinable_exports_pass():
    for options in ({}, {"int8": True, "fused": True}, {"format": "genai", "int4": True}, {"fp16": True, "generate":
                    True, "static_cache": True}, {"format": "hf", "fp16": True}, {"shortlist": "c", "int8": True}):
        assert ExportOptions(**options).conflict() is None
