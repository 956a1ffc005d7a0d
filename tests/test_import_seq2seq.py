"""`tfspec import` of encoder-decoder checkpoints (Marian, BART) against transformers: small random
models written by ``save_pretrained``, imported through the CLI; logits of the PyTorch
backend and of the exported ONNX graphs equal, greedy decoding equal to ``generate``, and the
published configuration's parameter count reconciled with transformers'."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_checkpoints import perturb
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.search import SearchOptions, search
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

VOCAB = 90
MARIAN_IDS = dict(pad_token_id=89, decoder_start_token_id=89, eos_token_id=0)
CASES = {
    "marian": ("MarianConfig", "MarianMTModel", dict(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=48, max_position_embeddings=64,
        activation_function="swish", scale_embedding=True, **MARIAN_IDS)),
    "marian-gelu-unscaled": ("MarianConfig", "MarianMTModel", dict(
        vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        activation_function="gelu", scale_embedding=False, **MARIAN_IDS)),
    "bart": ("BartConfig", "BartForConditionalGeneration", dict(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=1, bos_token_id=0, decoder_start_token_id=2, eos_token_id=2)),
    "bart-scaled-relu": ("BartConfig", "BartForConditionalGeneration", dict(
        vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=1, bos_token_id=0, decoder_start_token_id=2, eos_token_id=2, scale_embedding=True,
        activation_function="relu")),
}


def save(case: str, path: Path, **options):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    config_class, model_class, fields = CASES[case]
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    model = perturb(getattr(transformers, model_class)(getattr(transformers, config_class)(**fields)).eval())
    with torch.no_grad():  # a buffer, which transformers initialises to zeros
        model.final_logits_bias.normal_(0.0, 0.2)
    model.save_pretrained(path, **options)
    return model


def imported(case: str, tmp_path: Path, cli, **options):
    ref = save(case, tmp_path / "hf", **options)
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    return ref, model


def ids(case: str) -> tuple[int, int, int]:
    """(pad, eos, decoder start) of ``case``."""
    fields = CASES[case][2]
    return fields["pad_token_id"], fields["eos_token_id"], fields["decoder_start_token_id"]


def batch(case: str, seed: int = 1):
    """Sources (3, 11), row 1 padded after 6 tokens, each ending in eos; targets (3, 9)
    starting from the decoder start token, as transformers shifts labels."""
    pad, eos, start = ids(case)
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, VOCAB - 1, (3, 11), generator=gen)
    src[:, -1] = eos
    src[1, 5], src[1, 6:] = eos, pad
    tgt = torch.randint(3, VOCAB - 1, (3, 9), generator=gen)
    tgt[:, 0] = start
    return src, tgt


@pytest.mark.parametrize("case,options", [("marian", {}), ("marian-gelu-unscaled", {"max_shard_size": "40KB"}),
                                          ("bart", {}), ("bart-scaled-relu", {"max_shard_size": "40KB"})])
@torch.no_grad()
def test_logits_match_transformers(case, options, cli, tmp_path):
    ref, model = imported(case, tmp_path, cli, **options)
    src, tgt = batch(case)
    want = ref(input_ids=src, attention_mask=(src != ids(case)[0]).long(), decoder_input_ids=tgt).logits
    torch.testing.assert_close(model(src, tgt), want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", ["marian", "bart"])
def test_onnx_export_and_greedy_decoding_match_transformers(case, cli, tmp_path):
    ref, _ = imported(case, tmp_path, cli)
    assert_onnx_and_greedy_match(ref, *batch(case), ids(case), cli, tmp_path)


def assert_onnx_and_greedy_match(ref, src, tgt, special: tuple[int, int, int], cli, tmp_path: Path) -> None:
    """Export the import in ``tmp_path / "ours"``: its ONNX logits equal ``ref``'s, and greedy
    decoding (PyTorch, and onnxruntime's KV-cached step graph) equals ``ref.generate``.
    ``special``: (pad, eos, decoder start)."""
    from tfspec.backends.onnx import OnnxModel

    (pad, eos, start), ours = special, tmp_path / "ours"
    code, out, err = cli("export", ours, "--weights", ours / "model.safetensors", "-o", tmp_path / "onnx")
    assert code == 0, out + err
    onnx = OnnxModel(tmp_path / "onnx", device="cpu")
    with torch.no_grad():
        want = ref(input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt).logits
    np.testing.assert_allclose(onnx.logits(src=src.numpy(), tgt=tgt.numpy()), want.numpy(), atol=1e-4, rtol=0)
    # tfspec's search never emits a pad token decoding starts from (Marian's published configurations forbid
    # it too, with bad_words_ids): forbid it to transformers
    banned = {"bad_words_ids": [[pad]]} if pad == start else {}
    generated = ref.generate(src, attention_mask=(src != pad).long(), num_beams=1, do_sample=False, max_new_tokens=20,
                             forced_eos_token_id=None, **banned)[:, 1:].tolist()
    expected = [row[:row.index(eos)] if eos in row else row for row in generated]
    options = SearchOptions(beam=1, max_extra=20, max_length=20)
    model = build_module(load_spec(ours)).eval()
    load_weights(model, ours / "model.safetensors")
    assert search(TorchDecoder(model), src.numpy(), options) == expected
    assert search(onnx.decoder(), src.numpy(), options) == expected  # the step graph with its KV cache
    assert sum(map(len, expected)) > 20  # real generation was compared, not an immediate stop


PUBLISHED = {"opus-mt-en-de": ("MarianMTModel", 74_410_496, 73_886_208),
             "bart-base": ("BartModel", 139_420_416, 139_420_416),
             "bart-large-cnn": ("BartForConditionalGeneration", 406_290_432, 406_290_432),
             "distilbart-cnn-12-6": ("BartForConditionalGeneration", 305_510_400, 305_510_400)}
"""transformers' num_parameters() and its trainable count, as it reports them for these configurations."""


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_config_counts_reconcile_with_transformers(name, cli, tmp_path):
    """transformers counts Marian's two sinusoid tables as (frozen) parameters and keeps
    final_logits_bias as a buffer; tfspec computes the sinusoids and counts the output bias (a
    trained weight of the Marian model the checkpoint was converted from). BartModel has
    neither: the counts are equal; BartForConditionalGeneration has the buffer (bart-large-cnn,
    whose config also carries leftovers of older transformers: _num_labels,
    force_bos_token_to_be_generated)."""
    architecture, total, trainable = PUBLISHED[name]
    fixture = Path(__file__).parent / "fixtures" / "hf" / name
    code, _, err = cli("import", fixture, "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    config = transformers.AutoConfig.from_pretrained(fixture)
    with torch.device("meta"):
        theirs = getattr(transformers, architecture)(config)
    assert (theirs.num_parameters(), theirs.num_parameters(only_trainable=True)) == (total, trainable)
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    bias = theirs.final_logits_bias.numel() if hasattr(theirs, "final_logits_bias") else 0
    assert json.loads(out)["params"]["total"] == trainable + bias


@pytest.mark.parametrize("change,needle", [
    ({"decoder_attention_heads": 2}, "decoder_attention_heads: 2 is not supported"),
    ({"share_encoder_decoder_embeddings": False}, "share_encoder_decoder_embeddings: false is not supported"),
    ({"num_hidden_layers": 3}, "num_hidden_layers (3) differs from encoder_layers (2)"),
    ({"activation_function": "gelu_fast"}, "activation_function"),
    ({"scale_embedding": "yes"}, "scale_embedding must be true or false"),
])
def test_unsupported_configs_are_refused_by_name(change, needle, cli, tmp_path):
    (tmp_path / "hf").mkdir()
    config = json.loads(transformers.MarianConfig(**CASES["marian"][2]).to_json_string()) | change
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_a_fine_tune_is_named_after_its_directory_not_the_model_it_started_from(cli, tmp_path):
    """A fine-tune's ``_name_or_path`` names the model it was trained from (bart-base here)."""
    fine_tune = tmp_path / "bart-base-samsum"
    fine_tune.mkdir()
    (fine_tune / "config.json").write_bytes((Path(__file__).parent / "fixtures/hf/bart-base/config.json").read_bytes())
    assert json.loads((fine_tune / "config.json").read_text())["_name_or_path"].endswith("bart-base")
    code, _, err = cli("import", fine_tune, "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    assert load_spec(tmp_path / "ours").name == "bart-base-samsum"
