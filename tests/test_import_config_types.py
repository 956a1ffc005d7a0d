"""Every boolean, integer and float field a family reads from ``config.json`` refuses a value of
the wrong JSON type, as transformers' configuration classes do, with one ``error:`` naming the file
and the field: ``bool("false")`` is true, so a string read as a switch would tie the head of a model
saved untied (issue 51, 6), and Python's ``0 == False`` would take 0 for a required false.

Driven by the registry: for each family (``FAMILIES``), each field it maps or requires is given the
kind transformers' configuration class declares for it (its strict dataclass field: ``bool``,
``int``, ``float``, optionally null), else the kind of the family's own default (hand-copied from
transformers, ``test_import_defaults.py``); each wrong value below is one transformers refuses too.
A new family, or a new field of one, is covered without new test code."""

from __future__ import annotations

import dataclasses
import json
import types
import typing

import pytest

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import COMMON_REQUIRED
from tfspec.interop.hf.imports import FAMILIES, import_checkpoint

transformers = pytest.importorskip("transformers")

TOLERATED = {("llama4_text", "attn_temperature_tuning"): "an integer, as transformers 4.51 wrote Llama-4-Scout's "
                                                         "config.json (4), read by its truth"}
"""Fields tfspec reads more leniently than transformers 5, on purpose (a published file says so)."""
BASE_FIXES = {"deepseek_v2": {"num_experts_per_tok": 6},
              "vision-encoder-decoder": {"decoder": transformers.TrOCRConfig(is_decoder=True,
                                                                             add_cross_attention=True).to_dict()}}
"""What a default configuration needs to import at all (DeepseekV2Config leaves the routing unset)."""


def kind(annotation) -> type | None:
    """bool, int or float for a field declared as one (or as one or null), else None."""
    union = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
    declared = set(typing.get_args(annotation) if union else (annotation,)) - {type(None)}
    return {frozenset({bool}): bool, frozenset({int}): int, frozenset({float}): float,
            frozenset({int, float}): float}.get(frozenset(declared))


def wrong_values(field_kind: type, default) -> list:
    """JSON values of another type: a string of the right value, the neighbouring numeric kinds."""
    if field_kind is bool:
        return [json.dumps(bool(default)), int(bool(default))]
    if field_kind is int:
        return [str(default or 1), (default or 1) + 0.5, True]
    return [str(default or 0.5), True]


def cases(model_type: str) -> list[tuple[str, object]]:
    """(field, wrong value) for every typed field the family reads."""
    family = FAMILIES[model_type]
    config_class = transformers.CONFIG_MAPPING[model_type]
    declared = {f.name: kind(f.type) for f in dataclasses.fields(config_class)}
    base = config_class().to_dict()
    found = []
    for key in sorted({*family.mapped, *family.required, *COMMON_REQUIRED}):
        default = family.defaults.get(key, base.get(key))
        field_kind = declared[key] if key in declared else {bool: bool, int: int, float: float}.get(type(default))
        if field_kind is not None and (model_type, key) not in TOLERATED:
            found += [(key, value) for value in wrong_values(field_kind, default)
                      if key not in declared or refused_by_transformers(config_class, key, value)]
    return found


def refused_by_transformers(config_class, key: str, value) -> bool:
    """Whether the configuration class refuses ``value`` for its field ``key`` (the test's wrong
    values are wrong by the reference, not by tfspec's own reading)."""
    try:
        config_class(**{key: value})
    except Exception:  # noqa: BLE001 - its strict dataclass raises errors of its own types
        return True
    return False


@pytest.mark.parametrize("model_type", sorted(t for t in FAMILIES if t in transformers.CONFIG_MAPPING))
def test_every_typed_field_refuses_a_value_of_another_type(model_type, tmp_path):
    config_class = transformers.CONFIG_MAPPING[model_type]
    base = config_class().to_dict() | BASE_FIXES.get(model_type, {})
    accepted = []
    for i, (key, value) in enumerate(cases(model_type)):
        (tmp_path / str(i)).mkdir()
        path = tmp_path / str(i) / "config.json"
        path.write_text(json.dumps(base | {key: value}))
        try:
            import_checkpoint(path.parent, tmp_path / f"{i}-out", name="m", progress=False)
            accepted.append((key, value))
        except TfspecError as e:
            assert str(e).startswith(f"{path}: ") and key in str(e), (key, value, str(e))
    assert not accepted, f"{model_type} accepts values of the wrong type: {accepted}"


def test_a_string_false_does_not_tie_the_head(cli, tmp_path):
    """Issue 51, 6: ``"tie_word_embeddings": "false"`` in a Llama checkpoint's config.json is one
    error line naming the file and the field, exit 2, nothing written (it tied the head and left
    out lm_head.weight before)."""
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                      num_attention_heads=2).to_dict() | {"tie_word_embeddings": "false"}
    with pytest.raises(Exception, match="tie_word_embeddings"):
        transformers.LlamaConfig(**{"tie_word_embeddings": "false"})
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and err.startswith(f"error: {tmp_path / 'hf' / 'config.json'}: tie_word_embeddings must be "
                                        "true or false"), err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "ours").exists()
