"""tools/generators/hf_coverage.py, one architecture at a time (the full run writes docs/architectures.md; not in CI)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

TOOL = Path(__file__).resolve().parents[1] / "tools" / "generators" / "hf_coverage.py"


@pytest.fixture(scope="module")
def coverage():
    spec = importlib.util.spec_from_file_location("hf_coverage", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


@pytest.fixture(scope="module")
def types(coverage):
    return coverage.text_types()


def built(model_type: str, cls: str):
    with torch.device("meta"):
        return getattr(transformers, cls)(CONFIG_MAPPING[model_type]())


@pytest.mark.parametrize("model_type, cls", [("gpt2", "GPT2LMHeadModel"), ("bert", "BertForMaskedLM")])
def test_imported_exactly(coverage, types, model_type, cls):
    row = coverage.check(model_type, types[0][model_type])
    counted = sum(p.numel() for p in built(model_type, cls).parameters())
    assert (row.status, row.cls, row.theirs, row.ours, row.note) == ("exact", cls, counted, counted, "")


def test_refused_with_tfspecs_reason(coverage, types):
    row = coverage.check("rwkv", types[0]["rwkv"])
    counted = sum(p.numel() for p in built("rwkv", "RwkvForCausalLM").parameters())
    assert (row.status, row.cls, row.theirs, row.ours) == ("refused", "RwkvForCausalLM", counted, None)
    assert row.note == "model_type 'rwkv' is not supported"


def test_a_different_count_is_named(coverage, types):
    """Marian: transformers counts its two sinusoid tables (frozen) and keeps final_logits_bias as a
    buffer; tfspec computes the sinusoids and counts the bias."""
    row = coverage.check("marian", types[0]["marian"])
    theirs = built("marian", "MarianMTModel")
    tables = theirs.model.encoder.embed_positions.weight.numel() + theirs.model.decoder.embed_positions.weight.numel()
    assert row.status == "differ" and row.theirs == sum(p.numel() for p in theirs.parameters())
    assert row.ours - row.theirs == theirs.final_logits_bias.numel() - tables
    assert "the buffer final_logits_bias" in row.note and "encoder.embed_positions.weight" in row.note
    assert "frozen" in row.note and "unexplained" not in row.note


def test_text_rule_sets_multimodal_types_apart(types):
    text, apart = types
    assert {"gpt2", "bert", "qwen2", "t5"} <= text.keys()  # qwen2 is named by a decision-transformer mapping too
    assert {"gemma3", "whisper", "llava", "vit"} <= apart.keys()
    assert text["bart"][0] == "BartForConditionalGeneration" and text["bert"][0] == "BertLMHeadModel"


def test_page_sorts_rows_into_sections(coverage):
    rows = [coverage.Row("b", "exact", "B", 10, 10), coverage.Row("a", "refused", "A", 5, note="x | y"),
            coverage.Row("c", "not built", "C", note="ImportError: needs z")]
    modal = [coverage.Row("vit", "exact", "ViTForImageClassification", 7, 7)]
    page = coverage.render(rows, modal, {"v": "takes images, video or audio"}, "cmd", 1.0)
    assert "**text model types: 1 imported exactly, 0 imported with a different count, 1 refused" in page
    assert "**vision and audio model types: 1 imported exactly" in page and "| vit | ViTForImageClassification | 7 |" in page
    assert "| b | B | 10 |" in page and "| a | A | x \\| y |" in page and "| c | C | ImportError: needs z |" in page
