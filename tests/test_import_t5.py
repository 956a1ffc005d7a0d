"""`tfspec import` of T5 checkpoints against transformers: small random T5ForConditionalGeneration
models (the original relu flavour with tied, scaled output, and v1.1's gated-gelu with its own
lm_head) written by ``save_pretrained``, imported through the CLI; logits of the PyTorch
backend and of the exported ONNX graphs equal, greedy decoding (PyTorch, and onnxruntime's
KV-cached step graph) equal to ``generate``; T5's bucketing equal to transformers' own; the
published t5-small configuration's parameter count equal to transformers'."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_checkpoints import perturb
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.layers.relative_bias import bucket_table
from tfspec.spec import load_spec
from test_import_seq2seq import assert_onnx_and_greedy_match

transformers = pytest.importorskip("transformers")

VOCAB, PAD, EOS = 90, 0, 1
SMALL = dict(vocab_size=VOCAB, d_model=32, d_kv=6, d_ff=48, num_layers=2, num_heads=4,
             relative_attention_num_buckets=8, relative_attention_max_distance=12, pad_token_id=PAD,
             eos_token_id=EOS, decoder_start_token_id=PAD, layer_norm_epsilon=1e-3)  # epsilon off its default
CASES = {"t5": SMALL | {"feed_forward_proj": "relu"},
         "t5-v1_1": SMALL | {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
         # transformers' generate fails on stacks of unequal depth (its cache has num_layers layers)
         "t5-deeper-decoder": SMALL | {"num_decoder_layers": 3, "feed_forward_proj": "gated-relu"}}


def save(case: str, path: Path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(**CASES[case])).eval()
    if not CASES[case].get("tie_word_embeddings", True):  # as v1.1 checkpoints are: an lm_head of its own
        model.lm_head.weight = torch.nn.Parameter(torch.empty_like(model.shared.weight))
        model.config.tie_word_embeddings = False
    perturb(model, relative_attention_bias=1.0)  # the bias tables wide, so that every bucket matters
    model.save_pretrained(path)
    return model


def imported(case: str, tmp_path: Path, cli):
    ref = save(case, tmp_path / "hf")
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    return ref, model


def batch(seed: int = 1):
    """Sources (3, 11), row 1 padded after 6 tokens, each ending in eos; targets (3, 16)
    starting from the decoder start token (the pad token), as transformers shifts labels."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(2, VOCAB, (3, 11), generator=gen)
    src[:, -1] = EOS
    src[1, 5], src[1, 6:] = EOS, PAD
    tgt = torch.randint(2, VOCAB, (3, 16), generator=gen)
    tgt[:, 0] = PAD
    return src, tgt


@pytest.mark.parametrize("buckets,reach", [(32, 128), (8, 12), (16, 64), (6, 20), (33, 100)])
def test_buckets_are_transformers_buckets(buckets, reach):
    """Every distance, far past max_distance, lands in transformers' bucket, both directions."""
    from transformers.models.t5.modeling_t5 import T5Attention

    distance = torch.arange(-3 * reach, 3 * reach + 1)
    for bidirectional in (True, False):
        theirs = T5Attention._relative_position_bucket(distance, bidirectional, buckets, reach)
        table = bucket_table({"buckets": buckets, "max_distance": reach}, bidirectional)
        assert np.array_equal(table[distance.clamp(-reach, reach).numpy() + reach], theirs.numpy())


@pytest.mark.parametrize("case", sorted(CASES))
@torch.no_grad()
def test_logits_match_transformers(case, cli, tmp_path):
    ref, model = imported(case, tmp_path, cli)
    src, tgt = batch()
    want = ref(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt).logits
    torch.testing.assert_close(model(src, tgt), want, atol=1e-4, rtol=0)
    assert model.graph.spec.tie_embeddings == ("inputs" if case == "t5-v1_1" else "all")


@pytest.mark.parametrize("case", ["t5", "t5-v1_1"])
def test_onnx_export_and_greedy_decoding_match_transformers(case, cli, tmp_path):
    ref, _ = imported(case, tmp_path, cli)
    assert_onnx_and_greedy_match(ref, *batch(), (PAD, EOS, PAD), cli, tmp_path)


def test_published_t5_small_count_equals_transformers(cli, tmp_path):
    fixture = Path(__file__).parent / "fixtures" / "hf" / "t5-small"
    code, _, err = cli("import", fixture, "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    with torch.device("meta"):
        theirs = transformers.T5ForConditionalGeneration(transformers.AutoConfig.from_pretrained(fixture))
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    assert json.loads(out)["params"]["total"] == theirs.num_parameters() == 60_506_624


@pytest.mark.parametrize("change,needle", [
    ({"feed_forward_proj": "gated-gelu_fast"}, "feed_forward_proj: \"gated-gelu_fast\" is not supported"),
    ({"feed_forward_proj": "relu-gated"}, "feed_forward_proj: \"relu-gated\" is not supported"),
    ({"is_decoder": True}, "is_decoder: true is not supported"),
    ({"is_encoder_decoder": False}, "is_encoder_decoder: false is not supported"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false"),
    ({"relative_attention_num_buckets": 2}, "positional.buckets"),
    ({"relative_attention_max_distance": 3}, "max_distance (3) must exceed buckets // 2 (4)"),
    ({"use_relative_bias": True}, "unknown field use_relative_bias"),
])
def test_unsupported_configs_are_refused_by_name(change, needle, cli, tmp_path):
    (tmp_path / "hf").mkdir()
    config = json.loads(transformers.T5Config(**CASES["t5"]).to_json_string()) | change
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
