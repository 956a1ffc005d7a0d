"""`tfspec import` of the pre-norm BART and Marian relatives (mBART, Pegasus) against transformers:
small random models (every weight perturbed, final_logits_bias drawn) written by
``save_pretrained``, imported through the CLI; logits of the PyTorch backend and of the exported
ONNX graphs equal on a padded batch, greedy decoding (PyTorch, and onnxruntime's KV-cached step
graph) equal to ``generate`` from each model's decoder start, and with mbart-large-50's forced
language code as a search prefix, the default configuration counted as transformers counts, and
import -> ``export --format hf`` -> ``from_pretrained`` giving the original logits back.
M2M-100 (NLLB-200) is tested in ``test_import_seq2seq_more.py``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_checkpoints import assert_config_refused, assert_hf_round_trip, perturb
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.search import SearchOptions, search
from tfspec.spec import load_spec
from test_import_seq2seq import assert_onnx_and_greedy_match

transformers = pytest.importorskip("transformers")

VOCAB, LANGUAGE = 90, 85
"""LANGUAGE: a token standing for mbart-large-50's target language code (fr_XX)."""
SHAPE = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=48, max_position_embeddings=64,
             scale_embedding=True)
CASES = {
    # mbart-large-50's ids: decoding starts from </s> (2), the language code is forced after it
    "mbart-50": ("MBartConfig", "MBartForConditionalGeneration", SHAPE | dict(
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)),
    # MBartConfig's null decoder_start_token_id: generate starts from bos_token_id
    "mbart-bos-relu": ("MBartConfig", "MBartForConditionalGeneration", SHAPE | dict(
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=None, activation_function="relu",
        encoder_layers=1, scale_embedding=False)),
    # pegasus-large's relu; decoding starts from the pad token (0), which search never emits (the helper forbids it
    # to generate, which Pegasus's configs do not)
    "pegasus": ("PegasusConfig", "PegasusForConditionalGeneration", SHAPE | dict(
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, activation_function="relu")),
}


def save(case: str, path: Path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    config_class, model_class, fields = CASES[case]
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = perturb(getattr(transformers, model_class)(getattr(transformers, config_class)(**fields)).eval())
    with torch.no_grad():  # a buffer, which transformers initialises to zeros
        model.final_logits_bias.normal_(0.0, 0.2)
    model.save_pretrained(path)
    return model


def imported(case: str, tmp_path: Path, cli):
    ref = save(case, tmp_path / "hf")
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    return ref, model


def ids(case: str) -> tuple[int, int, int]:
    """(pad, eos, decoder start) of ``case``: the start as ``generate`` takes it."""
    fields = CASES[case][2]
    start = fields["decoder_start_token_id"]
    return fields["pad_token_id"], fields["eos_token_id"], fields["bos_token_id"] if start is None else start


def batch(case: str, seed: int = 1):
    """Sources (3, 11), row 1 right-padded after 6 tokens, each ending in eos; targets (3, 9)
    starting from the decoder start token."""
    pad, eos, start = ids(case)
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, VOCAB, (3, 11), generator=gen)
    src[:, -1] = eos
    src[1, 5], src[1, 6:] = eos, pad
    tgt = torch.randint(3, VOCAB, (3, 9), generator=gen)
    tgt[:, 0] = start
    return src, tgt


@pytest.mark.parametrize("case", CASES)
def test_logits_and_greedy_decoding_match_transformers(case, cli, tmp_path):
    ref, model = imported(case, tmp_path, cli)
    src, tgt = batch(case)
    with torch.no_grad():
        want = ref(input_ids=src, attention_mask=(src != ids(case)[0]).long(), decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, tgt), want, atol=1e-4, rtol=0)
    assert_onnx_and_greedy_match(ref, src, tgt, ids(case), cli, tmp_path)
    if case == "mbart-50":
        assert_forced_language_code_is_a_search_prefix(ref, model, tmp_path / "onnx")


def assert_forced_language_code_is_a_search_prefix(ref, model, onnx_dir: Path) -> None:
    """mbart-large-50 translates with ``forced_bos_token_id`` (the target language's code after
    the </s> decoding starts from): tfspec's search continues the prefix (</s>, code) to the
    same tokens, in PyTorch and in onnxruntime's step graph (exported to ``onnx_dir``)."""
    from tfspec.backends.onnx import OnnxModel

    src, _ = batch("mbart-50", seed=3)
    pad, eos, start = ids("mbart-50")
    generated = ref.generate(src, attention_mask=(src != pad).long(), num_beams=1, do_sample=False, max_new_tokens=20,
                             forced_bos_token_id=LANGUAGE, forced_eos_token_id=None)
    assert (generated[:, :2] == torch.tensor([start, LANGUAGE])).all()
    expected = [row[:row.index(eos)] if eos in row else row for row in generated[:, 2:].tolist()]
    options, prefix = SearchOptions(beam=1, max_extra=19, max_length=19), np.array([[start, LANGUAGE]] * len(src))
    assert search(TorchDecoder(model), src.numpy(), options, prefix=prefix) == expected
    assert search(OnnxModel(onnx_dir, device="cpu").decoder(), src.numpy(), options, prefix=prefix) == expected
    assert sum(map(len, expected)) > 20


DEFAULTS = {"mbart": ("MBartConfig", "MBartForConditionalGeneration"),
            "pegasus": ("PegasusConfig", "PegasusForConditionalGeneration")}
"""Each family's default configuration: mbart-large-cc25's and pegasus-large's shapes (BART's vocabulary)."""


@pytest.mark.parametrize("family", DEFAULTS)
def test_default_config_counts_as_transformers(family, cli, tmp_path):
    """tfspec counts final_logits_bias (a buffer in transformers: the Marian and fairseq models'
    output bias), and computes Pegasus's two sinusoid tables, which transformers holds as frozen
    parameters and counts: the rest is transformers' count exactly."""
    config_class, model_class = DEFAULTS[family]
    config = getattr(transformers, config_class)()
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(config.to_json_string())
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    with torch.device("meta"):
        theirs = getattr(transformers, model_class)(config)
    frozen = {name: p.numel() for name, p in theirs.named_parameters() if not p.requires_grad}
    assert sorted(frozen) == ([] if family == "mbart" else ["model.decoder.embed_positions.weight",
                                                            "model.encoder.embed_positions.weight"])
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    ours = json.loads(out)["params"]["total"]
    assert ours == theirs.num_parameters() - sum(frozen.values()) + theirs.final_logits_bias.numel()


@pytest.mark.parametrize("case", CASES)
@torch.no_grad()
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    original = save(case, tmp_path / "original")
    src, tgt = batch(case, seed=7)
    assert_hf_round_trip(cli, tmp_path / "original", original, CASES[case][1], src, torch.ones_like(tgt, dtype=bool),
                         attention_mask=(src != ids(case)[0]).long(), decoder_input_ids=tgt)


@pytest.mark.parametrize("case,change,needle", [
    ("mbart-50", {"decoder_start_token_id": None, "bos_token_id": None}, "bos_token_id must be an integer, got null"),
    ("mbart-50", {"decoder_attention_heads": 2}, "decoder_attention_heads: 2 is not supported"),
    ("mbart-50", {"max_position_embeddings": "1k"}, "max_position_embeddings must be an integer"),
    ("mbart-50", {"activation_function": "gelu_fast"}, "activation_function: \"gelu_fast\" is not supported"),
    ("pegasus", {"scale_embedding": "yes"}, "scale_embedding must be true or false"),
    ("pegasus", {"is_encoder_decoder": False}, "is_encoder_decoder: false is not supported"),
    ("pegasus", {"encoder_norm_first": True}, "unknown field encoder_norm_first"),
    # ProphetNet's n-stream self-attention predicts several future tokens: no tfspec attention kind
    ("pegasus", {"model_type": "prophetnet"}, "model_type 'prophetnet' is not supported"),
])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, _, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**fields).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)
