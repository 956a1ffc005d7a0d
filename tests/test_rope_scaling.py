"""Rotary frequency scaling for long contexts (``positional.scaling``: llama3, linear, dynamic,
yarn, longrope) against transformers: the frequencies and attention factor of each type equal
transformers' ``ROPE_INIT_FUNCTIONS`` at lengths within and past the original one; small random
checkpoints of each type (original length 16, run to 40 tokens) imported through the CLI give
transformers' logits in PyTorch and onnxruntime, and ``generate``'s greedy tokens through both
KV caches, crossing the original length while decoding (dynamic NTK growing its base per step,
LongRoPE switching to its long factors); DeepSeek-V2's yarn with its softmax mscale; Phi-3's
longrope; import -> ``export --format hf`` round trips; a DeepSeek-V2-Lite-shaped config counts
what transformers counts; bad scaling fields and configs are refused with one error line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_checkpoints import (assert_config_imports_at_count, assert_decoder_import_matches, assert_hf_round_trip,
                            assert_pytorch_import_matches, perturb)

transformers = pytest.importorskip("transformers")

VOCAB, PAD, ORIGINAL, LENGTH = 100, 3, 16, 40
PAIRS = 8
"""Rotated pairs per head (head_dim 16): LongRoPE's lists hold one factor each."""
SHORT, LONG = [1.0 + 0.1 * i for i in range(PAIRS)], [1.0 + 1.5 * i for i in range(PAIRS)]
ROPES = {
    "linear": {"factor": 2.5},
    "dynamic": {"factor": 3.0},
    "yarn": {"factor": 4.0, "original_max_position_embeddings": ORIGINAL, "beta_fast": 8.0, "beta_slow": 0.5},
    "yarn-mscale": {"factor": 40.0, "original_max_position_embeddings": ORIGINAL, "mscale": 0.8,
                    "mscale_all_dim": 0.707, "truncate": False},
    "longrope": {"short_factor": SHORT, "long_factor": LONG, "original_max_position_embeddings": ORIGINAL},
    "longrope-given": {"short_factor": SHORT, "long_factor": LONG, "original_max_position_embeddings": ORIGINAL,
                       "attention_factor": 1.3},
    "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": ORIGINAL},
}
"""transformers' rope settings per case (case name: type, then a variant); dynamic's original
length is max_position_embeddings."""


def rope(case: str) -> dict:
    kind = case.split("-")[0]
    return {"rope_type": kind, "rope_theta": 100.0, **ROPES[case]}


def positions(case: str) -> int:
    """max_position_embeddings: dynamic scales past it, the others past ORIGINAL below it."""
    return ORIGINAL if case.startswith("dynamic") else 64


def llama_config(case: str, model: str = "Llama", **changes):
    return getattr(transformers, f"{model}Config")(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=positions(case), rms_norm_eps=1e-3,
        pad_token_id=PAD, bos_token_id=1, eos_token_id=2, rope_parameters=rope(case), **changes)


@pytest.mark.parametrize("case", ROPES)
def test_frequencies_and_attention_factor_equal_transformers(case):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from tfspec.interop.hf.family import Source
    from tfspec.interop.hf.llama import Llama
    from tfspec.ir.positions import rotary_frequencies
    from tfspec.ir.rope_scaling import attention_factor
    from tfspec.spec import Spec

    config = llama_config(case)
    spec = Spec.model_validate({"name": "m", **Llama().spec_data(Source(config.to_dict(), "c", "LlamaForCausalLM"))})
    ours = spec.plan("decoder")[0].attention.positions.model_dump()
    for length in (None, ORIGINAL, ORIGINAL + 1, LENGTH):
        theirs, factor = ROPE_INIT_FUNCTIONS[case.split("-")[0]](config, "cpu", seq_len=length)
        np.testing.assert_allclose(rotary_frequencies(16, ours, length), theirs.double().numpy(), rtol=2e-7)
        assert attention_factor(ours) == pytest.approx(factor, rel=1e-12)


def save(config, model: str, path):
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    ref = perturb(getattr(transformers, f"{model}ForCausalLM")(config).eval())
    ref.save_pretrained(path)
    return ref


def long_batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens (3, LENGTH) from 5 .. VOCAB - 1, every one real: past ORIGINAL to the end."""
    tokens = torch.randint(5, VOCAB, (3, LENGTH), generator=torch.Generator().manual_seed(seed))
    return tokens, torch.ones_like(tokens, dtype=torch.bool)


FAMILIES = {"linear": "Llama", "dynamic": "Llama", "yarn": "Qwen2", "yarn-mscale": "Mistral", "longrope": "Llama"}
"""Which family carries each case's logits-and-generate test (Qwen2.5 and Qwen3 publish yarn)."""


@pytest.mark.parametrize("case", FAMILIES)
def test_logits_past_the_original_length_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    """Logits at 40 tokens, then 4-token prompts continued by 20 greedy tokens: decoding crosses
    the original length 16, where dynamic NTK grows its base each step and LongRoPE switches to
    its long factors for the steps after (the keys cached before keep theirs, as in transformers)."""
    model = FAMILIES[case]
    ref = save(llama_config(case, model), model, tmp_path / "hf")
    assert_decoder_import_matches(cli, tmp_path / "hf", ref, *long_batch(), PAD)


def test_phi3_longrope_logits_and_greedy_tokens_past_the_original_length(cli, tmp_path):
    """Phi-3's longrope (the top-level original_max_position_embeddings) at 40 tokens, and 20
    greedy tokens after 20-token prompts, already past the original length (Phi-3's generate
    recomputes its cache when it first passes it: tfspec does not, see phi3.py)."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.backends.torch import TorchDecoder
    from tfspec.search import SearchOptions, search

    config = transformers.Phi3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, original_max_position_embeddings=ORIGINAL,
        pad_token_id=PAD, bos_token_id=1, eos_token_id=2, partial_rotary_factor=0.5,
        rope_parameters={"rope_type": "longrope", "rope_theta": 100.0, "short_factor": SHORT[:4],
                         "long_factor": LONG[:4]})
    ref = save(config, "Phi3", tmp_path / "hf")
    tokens, keep = long_batch()
    model, ours, want = assert_pytorch_import_matches(cli, tmp_path / "hf", ref, tokens, keep)
    assert cli("export", ours, "-o", tmp_path / "onnx")[0] == 0
    onnx = OnnxModel(tmp_path / "onnx", device="cpu")
    np.testing.assert_allclose(onnx.logits(tgt=tokens.numpy()), want.numpy(), atol=1e-4, rtol=0)
    prompt = tokens[:, :20]
    expected = ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20, min_new_tokens=20,
                            do_sample=False)[:, 20:].tolist()
    options = SearchOptions(beam=1, max_length=20, min_length=20, max_extra=20)
    assert search(TorchDecoder(model), None, options, prefix=prompt.numpy()) == expected
    assert search(onnx.decoder(), None, options, prefix=prompt.numpy()) == expected
    assert_hf_round_trip(cli, tmp_path / "hf", ref, "Phi3ForCausalLM", tokens, keep)


DEEPSEEK = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 64, "rms_norm_eps": 1e-3,
            "pad_token_id": PAD, "bos_token_id": 1, "eos_token_id": 2, "n_routed_experts": 4,
            "num_experts_per_tok": 2, "moe_intermediate_size": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 8, "v_head_dim": 12, "q_lora_rank": None, "first_k_dense_replace": 1,
            "n_shared_experts": 1}


def test_deepseek_v2_yarn_with_its_softmax_mscale_matches_transformers(cli, tmp_path):
    """DeepSeek-V2's published rope settings (yarn, factor 40, mscale = mscale_all_dim = 0.707:
    attention factor 1, the softmax scale times mscale(40, 0.707)^2) at original length 16."""
    config = transformers.DeepseekV2Config(**DEEPSEEK, rope_parameters={
        "rope_type": "yarn", "rope_theta": 100.0, "factor": 40.0, "original_max_position_embeddings": ORIGINAL,
        "mscale": 0.707, "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1})
    ref = save(config, "DeepseekV2", tmp_path / "hf")
    assert_decoder_import_matches(cli, tmp_path / "hf", ref, *long_batch(), PAD)
    assert_hf_round_trip(cli, tmp_path / "hf", ref, "DeepseekV2ForCausalLM", *long_batch())


@pytest.mark.parametrize("case", ["dynamic", "yarn-mscale", "longrope-given"])
def test_export_hf_writes_the_scaling_back(case, cli, tmp_path):
    model = "Qwen2" if case.startswith("yarn") else "Llama"
    ref = save(llama_config(case, model), model, tmp_path / "hf")
    assert_hf_round_trip(cli, tmp_path / "hf", ref, f"{model}ForCausalLM", *long_batch())


def test_deepseek_v2_lite_shaped_config_with_yarn_imports_at_transformers_count(cli, tmp_path):
    """DeepSeek-V2-Lite's published shape and rope settings, config alone."""
    config = transformers.DeepseekV2Config(
        vocab_size=102400, hidden_size=2048, intermediate_size=10944, num_hidden_layers=27, num_attention_heads=16,
        num_key_value_heads=16, q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
        v_head_dim=128, n_routed_experts=64, n_shared_experts=2, moe_intermediate_size=1408, num_experts_per_tok=6,
        first_k_dense_replace=1, max_position_embeddings=163840, rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
            "mscale": 0.707, "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1})
    assert_config_imports_at_count(cli, tmp_path / "lite", config, "DeepseekV2ForCausalLM")


SPEC = """
name: m
family: decoder-only
vocab: {{size: 40}}
d_model: 32
heads: 2
d_ff: 64
positional: {{kind: rotary, max_len: 64, scaling: {scaling}}}
decoder: {{layers: 1, block: [causal_self_attention, ffn]}}
"""


@pytest.mark.parametrize("scaling,needle", [
    ("{type: yarm, factor: 2}", "'yarm'"),
    ("{type: yarn, factor: 2}", "original_max_position_embeddings"),
    ("{type: yarn, factor: -2, original_max_position_embeddings: 16}", "factor"),
    ("{type: yarn, factor: 2, original_max_position_embeddings: 16, beta_fast: 1, beta_slow: 2}",
     "beta_fast (1.0) must exceed beta_slow (2.0)"),
    ("{type: linear, factor: 2, low_freq_factor: 1}", "low_freq_factor"),
    ("{type: dynamic, factor: 0.5, original_max_position_embeddings: 16}", "factor"),
    ("{type: longrope, short_factor: [1, 1], long_factor: [1], original_max_position_embeddings: 16}",
     "long_factor has 1 values and short_factor 2"),
    ("{type: longrope, short_factor: [1, 1], long_factor: [2, 2], original_max_position_embeddings: 16}",
     "short_factor and long_factor hold 2 values; the layer rotates 16 features, 8 pairs"),
])
def test_bad_scaling_fields_give_one_error_line(scaling, needle, cli, write_spec):
    code, out, err = cli("report", write_spec(SPEC.format(scaling=scaling)))
    assert code == 2 and needle in err and "scaling" in err and "Traceback" not in err, err


@pytest.mark.parametrize("change,needle", [
    ({"rope_type": "longrope", "short_factor": "big", "long_factor": LONG}, "short_factor must be a list of numbers"),
    ({"rope_type": "yarn", "factor": "big"}, "factor must be a number"),
    ({"rope_type": "yarn", "factor": 4.0, "truncate": "no"}, "truncate must be true or false"),
    ({"rope_type": "proportional", "factor": 2.0}, 'rope type "proportional" is not supported'),
])
def test_bad_rope_configs_are_refused_by_name(change, needle, cli, tmp_path):
    import json

    config = llama_config("linear").to_dict() | {"rope_parameters": {"rope_theta": 100.0, **change}}
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
