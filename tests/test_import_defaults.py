"""A ``config.json`` that leaves a field out means what transformers' configuration class
makes of it: its default. For every family, a file holding only ``model_type`` imports as the
same spec as the class's full default configuration written out (``to_dict``), which is the
reference; a hand-copied fallback that differs (MistralConfig's 14,336-wide MLP read as Llama's
11,008, M2M-100's relu as Marian's gelu) would import a different model without a word.

transformers is not a dependency of tfspec, so the families hold those defaults (``defaults``)
and this test reads them from transformers."""

from __future__ import annotations

import json

import pytest

from tfspec.errors import TfspecError
from tfspec.interop.hf.imports import FAMILIES, import_checkpoint

transformers = pytest.importorskip("transformers")


def imported(tmp_path, name: str, config: dict) -> dict | str:
    """The canonical spec ``config`` imports as, or why it is refused (DeepseekV2Config's
    unset num_experts_per_tok is, either way)."""
    (tmp_path / name).mkdir()
    (tmp_path / name / "config.json").write_text(json.dumps(config))
    try:
        return import_checkpoint(tmp_path / name, tmp_path / f"{name}-spec", name="m", progress=False).spec.canonical()
    except TfspecError as e:
        return str(e).split("config.json: ", 1)[-1]


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_a_config_without_fields_takes_the_config_class_defaults(model_type, tmp_path):
    full = transformers.AutoConfig.for_model(model_type).to_dict()
    assert imported(tmp_path, "bare", {"model_type": model_type}) == imported(tmp_path, "full", full)
