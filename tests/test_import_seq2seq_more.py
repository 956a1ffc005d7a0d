"""`tfspec import` of M2M-100 (NLLB-200's class), umT5, Switch Transformers, NLLB-MoE and
BlenderbotSmall against transformers: small random models (every weight perturbed) written by
``save_pretrained`` and imported through the CLI; logits of the PyTorch backend and of the exported ONNX graphs equal
on a right-padded batch, 20 greedy tokens (PyTorch, and onnxruntime's KV-cached step graph)
equal to ``generate``, each default configuration counted as transformers counts it, import ->
``export --format hf`` -> ``from_pretrained`` giving the original logits back, and bad or
inexact configurations refused in one line.

NLLB-MoE's reference is transformers' model with its experts dispatched as transformers 4 (and
fairseq) did (``fairseq_experts``): transformers 5.24's NllbMoeExperts applies expert_1 and
expert_0 to every token whatever the router chose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from hf_checkpoints import (assert_config_imports_at_count, assert_config_refused, assert_hf_round_trip, save_random,
                            transformers_count)
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.spec import load_spec
from test_import_seq2seq import assert_onnx_and_greedy_match

transformers = pytest.importorskip("transformers")

VOCAB = 90
T5_SHAPE = dict(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=48, num_heads=4, relative_attention_num_buckets=8,
                relative_attention_max_distance=20, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                layer_norm_epsilon=1e-3)
CASES = {
    # NLLB-200's ids (pad 1, </s> 2 starts decoding): fairseq's sinusoids read from row pad + 1 = 2
    "m2m_100": ("M2M100Config", "M2M100ForConditionalGeneration", dict(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=48, max_position_embeddings=64,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)),
    # umt5-small's untied, unscaled output; each of the layers has its own bias table
    "umt5": ("UMT5Config", "UMT5ForConditionalGeneration", T5_SHAPE | dict(
        num_layers=2, feed_forward_proj="gated-gelu", tie_word_embeddings=False)),
    # layers 1 and 3 of the encoder and 1 of the decoder sparse; 2 positions per expert: 11 sources and 9 targets
    # overflow it (decoding steps of one position never do)
    "switch": ("SwitchTransformersConfig", "SwitchTransformersForConditionalGeneration", T5_SHAPE | dict(
        num_layers=4, num_decoder_layers=2, num_experts=4, num_sparse_encoder_layers=2, num_sparse_decoder_layers=1,
        expert_capacity=2)),
    # layer 1 of each stack sparse: top-2 of 4 biased experts, outputs scaled by 1 - moe_token_dropout
    "nllb_moe": ("NllbMoeConfig", "NllbMoeForConditionalGeneration", dict(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=48, max_position_embeddings=64,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, num_experts=4,
        encoder_sparse_step=2, decoder_sparse_step=2, moe_token_dropout=0.2)),
    # scaled encoder embeddings normalised with the positions; the decoder's unscaled, normalised before them
    "blenderbot_small": ("BlenderbotSmallConfig", "BlenderbotSmallForConditionalGeneration", dict(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=48, max_position_embeddings=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, scale_embedding=True)),
}


def fairseq_experts(self, hidden_states, router_mask, router_probs):
    """transformers 4.46's NllbMoeSparseMLP dispatch (``router_mask = router_probs.bool()``): each
    token through every expert its combine weights name, times that weight, the sum scaled by
    1 - moe_token_dropout at inference."""
    out = torch.zeros_like(hidden_states)
    for expert in range(self.num_experts):
        rows = router_probs[:, expert].nonzero(as_tuple=True)[0]
        y = self[f"expert_{expert}"](hidden_states[rows]) * router_probs[rows, expert, None]
        out.index_add_(0, rows, (y * (1 - self.moe_token_dropout)).to(out.dtype))
    return out


@pytest.fixture(autouse=True)
def _nllb_moe_dispatch(monkeypatch):
    from transformers.models.nllb_moe.modeling_nllb_moe import NllbMoeExperts
    monkeypatch.setattr(NllbMoeExperts, "forward", fairseq_experts)


def save(case: str, path: Path):
    config_class, model_class, fields = CASES[case]
    transformers.utils.logging.set_verbosity_error()
    return save_random(model_class, getattr(transformers, config_class)(**fields), path)


def special(case: str) -> tuple[int, int, int]:
    """(pad, eos, decoder start)."""
    fields = CASES[case][2]
    return fields["pad_token_id"], fields["eos_token_id"], fields["decoder_start_token_id"]


def batch(case: str, seed: int = 1):
    """Sources (3, 11), row 1 right-padded after 6 tokens, each ending in eos; targets (3, 9)
    from the decoder start, without pad tokens (M2M-100 numbers positions past them)."""
    pad, eos, start = special(case)
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, VOCAB, (3, 11), generator=gen)
    src[:, -1] = eos
    src[1, 5], src[1, 6:] = eos, pad
    tgt = torch.randint(3, VOCAB, (3, 9), generator=gen)
    tgt[:, 0] = start
    return src, tgt


@pytest.mark.parametrize("case", CASES)
def test_logits_and_greedy_decoding_match_transformers(case, cli, tmp_path):
    ref = save(case, tmp_path / "hf")
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    src, tgt = batch(case)
    with torch.no_grad():
        want = ref(input_ids=src, attention_mask=(src != special(case)[0]).long(), decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, tgt), want, atol=1e-4, rtol=0)
    assert_onnx_and_greedy_match(ref, src, tgt, special(case), cli, tmp_path)
    if case == "switch":  # the capacity dropped positions: unbounded experts give other logits
        for router in (m for m in ref.modules() if hasattr(m, "expert_capacity")):
            router.expert_capacity = src.shape[1]
        with torch.no_grad():
            unbounded = ref(input_ids=src, attention_mask=(src != special(case)[0]).long(), decoder_input_ids=tgt)
        assert (unbounded.logits - want).abs().max() > 1e-2


DEFAULTS = {"m2m_100": ("M2M100Config", "M2M100ForConditionalGeneration"),
            "umt5": ("UMT5Config", "UMT5ForConditionalGeneration"),
            "switch": ("SwitchTransformersConfig", "SwitchTransformersForConditionalGeneration"),
            "nllb_moe": ("NllbMoeConfig", "NllbMoeForConditionalGeneration"),
            "blenderbot_small": ("BlenderbotSmallConfig", "BlenderbotSmallForConditionalGeneration")}
"""m2m100_418M's shape; umT5-small's; switch-base-8's (3 of 12 layers sparse per stack, 8 experts);
NLLB-MoE's layers at d_model 1024 with 128 experts in every 4th layer; blenderbot_small-90M's."""


@pytest.mark.parametrize("family", DEFAULTS)
def test_default_config_counts_as_transformers(family, cli, tmp_path):
    """M2M-100's sinusoids are buffers transformers does not count (tfspec computes them);
    BlenderbotSmall's final_logits_bias is a buffer there too, a trained output bias tfspec
    counts: its count is transformers' plus that buffer's size."""
    config_class, model_class = DEFAULTS[family]
    config = getattr(transformers, config_class)()
    if family != "blenderbot_small":
        return assert_config_imports_at_count(cli, tmp_path / "hf", config, model_class)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(config.to_json_string())
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    code, out, _ = cli("report", tmp_path / "ours", "--format", "json")
    with torch.device("meta"):
        model = getattr(transformers, model_class)(config)
    bias = dict(model.named_buffers())["final_logits_bias"].numel()
    assert code == 0 and json.loads(out)["params"]["total"] == transformers_count(config, model_class) + bias


@pytest.mark.parametrize("case", CASES)
@torch.no_grad()
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    original = save(case, tmp_path / "original")
    src, tgt = batch(case, seed=7)
    assert_hf_round_trip(cli, tmp_path / "original", original, CASES[case][1], src, torch.ones_like(tgt, dtype=bool),
                         attention_mask=(src != special(case)[0]).long(), decoder_input_ids=tgt)


@pytest.mark.parametrize("case,change,needle", [
    ("m2m_100", {"scale_embedding": "yes"}, "scale_embedding must be true or false"),
    ("m2m_100", {"decoder_attention_heads": 2}, "decoder_attention_heads: 2 is not supported"),
    ("m2m_100", {"max_position_embeddings": "1k"}, "max_position_embeddings must be an integer"),
    ("umt5", {"feed_forward_proj": "gated-swiglu"}, "feed_forward_proj: \"gated-swiglu\" is not supported"),
    ("umt5", {"relative_attention_num_buckets": 1.5}, "relative_attention_num_buckets must be an integer"),
    ("switch", {"router_bias": True}, "router_bias: true is not supported"),
    ("switch", {"router_dtype": "bfloat16"}, "router_dtype: \"bfloat16\" is not supported"),
    ("switch", {"expert_capacity": "64"}, "expert_capacity must be an integer"),
    ("switch", {"dense_act_fn": "gelu_fast"}, "dense_act_fn: \"gelu_fast\" is not supported"),
    ("switch", {"n_positions": 512}, "unknown field n_positions"),
    ("nllb_moe", {"second_expert_policy": "sampling"}, "second_expert_policy: \"sampling\" is not supported"),
    ("nllb_moe", {"moe_eval_capacity_token_fraction": 0.5}, "moe_eval_capacity_token_fraction: 0.5 is not supp"),
    ("nllb_moe", {"router_bias": True}, "router_bias: true is not supported"),
    ("nllb_moe", {"moe_token_dropout": 1.0}, "moe_token_dropout must be at least 0 and below 1, got 1.0"),
    ("nllb_moe", {"encoder_sparse_step": "4"}, "encoder_sparse_step must be an integer"),
    ("blenderbot_small", {"scale_embedding": 1}, "scale_embedding must be true or false"),
    ("blenderbot_small", {"decoder_vocab_size": 50}, "decoder_vocab_size: 50 is not supported"),
    ("blenderbot_small", {"normalize_before": True, "extra": 1}, "unknown field extra"),
])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, _, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**fields).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)


@pytest.mark.parametrize("change,needle", [
    ({"embed_norm": False}, "decoder.embed_norm_on: embed_norm_on: tokens places the embedding norm, but embed_norm "
                            "is false"),
    ({"decoder": {"embed_norm_on": "positions"}}, "decoder.embed_norm_on: input should be 'sum' or 'tokens'"),
    ({"decoder": {"embed_scale": "maybe"}}, "decoder.embed_scale: input should be a valid boolean"),
])
def test_bad_stack_embedding_fields_are_one_error_line(change, needle, cli, tmp_path):
    """BlenderbotSmall's imported spec with its decoder's embedding options made wrong."""
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(transformers.BlenderbotSmallConfig(**CASES["blenderbot_small"][2])
                                                 .to_json_string())
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    data = yaml.safe_load((tmp_path / "ours" / "spec.yaml").read_text())
    for key, value in change.items():
        data[key] = data[key] | value if isinstance(value, dict) else value
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data))
    code, _, err = cli("validate", tmp_path / "bad.yaml")
    assert code == 2 and err.startswith("error: ") and needle in err and len(err.strip().splitlines()) == 1, err
