"""`tfspec import` of Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, PhiMoE and gpt-oss checkpoints against transformers:
small random mixtures of experts (4 experts, top 2, every weight perturbed, routers included)
written by ``save_pretrained``, imported through the CLI; logits of the PyTorch backend and of
the exported ONNX graph equal transformers' at the real tokens of a right-padded batch, 20
greedy tokens equal ``generate``'s, the default configurations count what transformers counts,
import -> ``export --format hf`` -> ``from_pretrained`` gives the original logits back, and
bad configurations are refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hf_checkpoints import (assert_config_imports_at_count, assert_config_refused, assert_decoder_import_matches,
                            assert_hf_round_trip, assert_pytorch_import_matches, right_padded, save_random)
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")

VOCAB, PAD = 120, 1  # no model below generates id 1 in its 20 greedy tokens
SHAPE = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 40, "rms_norm_eps": 1e-3,
         "pad_token_id": PAD, "bos_token_id": 2, "eos_token_id": 3, "num_experts_per_tok": 2}
"""rms_norm_eps off its defaults, so that an importer ignoring it computes something else."""
CASES = {
    # renormalised top 2 of 4, a 6-token sliding window (the batch is 13 long)
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {"num_local_experts": 4, "sliding_window": 6}),
    # layer 0 dense (mlp_only_layers), layer 1 4 experts 24 wide and a gated shared expert 40 wide; not renormalised
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", {
        "num_experts": 4, "moe_intermediate_size": 24, "shared_expert_intermediate_size": 40, "mlp_only_layers": [0]}),
    # layer 0 dense by decoder_sparse_step 2, heads 16 wide under a 32-wide model, renormalised, tied
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", {
        "num_experts": 4, "moe_intermediate_size": 24, "decoder_sparse_step": 2, "head_dim": 16,
        "norm_topk_prob": True, "tie_word_embeddings": True}),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", {"num_experts": 4, "attention_bias": True}),
    # LayerNorms, biased attention and output; SparseMixer with a closeness bound the perturbed router
    # logits fall within (the second expert's softmax holds several)
    "phimoe": ("PhimoeConfig", "PhimoeForCausalLM", {
        "num_local_experts": 4, "attention_bias": True, "lm_head_bias": True, "router_jitter_noise": 0.3,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0}}),
    "phimoe-window": ("PhimoeConfig", "PhimoeForCausalLM", {"num_local_experts": 4, "sliding_window": 6,
                                                            "router_jitter_noise": 0.1}),
    # Phi-3.5-MoE's longrope over an original 8 positions (the batch is 13 long), its mscales made to differ
    "phimoe-longrope": ("PhimoeConfig", "PhimoeForCausalLM", {
        "num_local_experts": 4, "attention_bias": True, "router_jitter_noise": 0.3, "rope_parameters": {
            "rope_type": "longrope", "rope_theta": 1000.0, "short_factor": [1.0, 1.5, 2.0, 3.0],
            "long_factor": [2.0, 3.0, 5.0, 7.0], "short_mscale": 1.1, "long_mscale": 1.3,
            "original_max_position_embeddings": 8}}),
    # attention sinks, sliding (6 tokens) and full layers alternating, a biased router, biased experts whose
    # clamp the perturbed branches reach, YaRN over 10 positions
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", {
        "num_local_experts": 4, "num_hidden_layers": 3, "head_dim": 8, "sliding_window": 6, "swiglu_limit": 1.5,
        "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                            "original_max_position_embeddings": 10, "rope_theta": 1000.0}}),
    # layer_types not the default alternation
    "gpt_oss-layers": ("GptOssConfig", "GptOssForCausalLM", {
        "num_local_experts": 4, "num_hidden_layers": 3, "head_dim": 8, "sliding_window": 6,
        "layer_types": ["full_attention", "sliding_attention", "sliding_attention"]}),
}
"""case -> (config class, model class, config fields beyond SHAPE)."""


def save(case: str, path):
    """A random ``case`` model written to ``path``; returns it (eval mode)."""
    config_class, model_class, fields = CASES[case]
    return save_random(model_class, getattr(transformers, config_class)(**SHAPE | fields), path)


@pytest.mark.parametrize("case", [case for case in CASES if case != "phimoe-longrope"])  # its own test below
def test_logits_and_greedy_tokens_match_transformers(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_decoder_import_matches(cli, tmp_path / "hf", save(case, tmp_path / "hf"), tokens, keep, PAD)


def test_dense_and_sparse_layers_are_where_transformers_puts_them(cli, tmp_path):
    """decoder_sparse_step 2 with mlp_only_layers [3] over 6 layers: layers 1 and 5 sparse."""
    config = transformers.Qwen2MoeConfig(**SHAPE | CASES["qwen2_moe"][2] | {
        "num_hidden_layers": 6, "decoder_sparse_step": 2, "mlp_only_layers": [3]})
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(config.to_json_string())
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    with torch.device("meta"):
        layers = transformers.Qwen2MoeForCausalLM(config).model.layers
    theirs = [type(layer.mlp).__name__.endswith("SparseMoeBlock") for layer in layers]
    ours = [layer.sublayers[1].kind == "moe" for layer in load_spec(tmp_path / "ours").plan("decoder")]
    assert ours == theirs == [False, True, False, False, False, True]


DEFAULTS = {"mixtral": ("MixtralConfig", "MixtralForCausalLM"), "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
            "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"), "olmoe": ("OlmoeConfig", "OlmoeForCausalLM"),
            "phimoe": ("PhimoeConfig", "PhimoeForCausalLM"), "gpt_oss": ("GptOssConfig", "GptOssForCausalLM")}
"""Each family's default configuration: MixtralConfig() (Mixtral-8x7B's), Qwen2MoeConfig() (Qwen1.5-MoE-A2.7B's),
Qwen3MoeConfig() (128 experts, top 8, 24 layers of 2048), OlmoeConfig() (OLMoE-1B-7B's), PhimoeConfig()
(Phi-3.5-MoE's), GptOssConfig() (gpt-oss-120b's: sinks and biases counted)."""


@pytest.mark.parametrize("family", DEFAULTS)
def test_default_config_counts_as_transformers(family, cli, tmp_path):
    config_class, model_class = DEFAULTS[family]
    assert_config_imports_at_count(cli, tmp_path / "hf", getattr(transformers, config_class)(), model_class)


@pytest.mark.parametrize("length", [6, 13])
def test_phimoe_longrope_matches_transformers_within_and_past_the_original_length(length, cli, tmp_path):
    """Phi-3.5-MoE's longrope as transformers' PhiMoE computes it (short_factor at every length,
    short_mscale within the original 8 positions, long_mscale past them), in PyTorch and onnxruntime;
    past it, 20 greedy tokens after 10-token prompts equal ``generate``'s through both caches (prompts
    already past the original length: PhiMoE's generate recomputes its cache when it first passes it,
    tfspec does not, as phi3.py says)."""
    import numpy as np

    from tfspec.backends.onnx import OnnxModel
    from tfspec.backends.torch import TorchDecoder
    from tfspec.search import SearchOptions, search

    ref = save("phimoe-longrope", tmp_path / "hf")
    tokens, keep = (t[:, :length] for t in right_padded(VOCAB, PAD))
    model, ours, want = assert_pytorch_import_matches(cli, tmp_path / "hf", ref, tokens, keep)
    assert cli("export", ours, "-o", tmp_path / "onnx")[0] == 0
    onnx = OnnxModel(tmp_path / "onnx", device="cpu")
    np.testing.assert_allclose(onnx.logits(tgt=tokens.numpy())[keep.numpy()], want[keep].numpy(), atol=1e-4, rtol=0)
    if length > 8:
        prompt = tokens[[0, 2], :10]
        expected = ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20,
                                min_new_tokens=20, do_sample=False)[:, 10:].tolist()
        assert PAD not in sum(expected, [])
        options = SearchOptions(beam=1, max_length=20, min_length=20, max_extra=20)
        assert search(TorchDecoder(model), None, options, prefix=prompt.numpy()) == expected
        assert search(onnx.decoder(), None, options, prefix=prompt.numpy()) == expected


@pytest.mark.parametrize("case", [case for case in CASES if "-" not in case] + ["phimoe-longrope"])
def test_round_trip_gives_the_original_logits(case, cli, tmp_path):
    tokens, keep = right_padded(VOCAB, PAD)
    assert_hf_round_trip(cli, tmp_path / "original", save(case, tmp_path / "original"), CASES[case][1], tokens, keep)


@pytest.mark.parametrize("case,change,needle", [
    ("mixtral", {"attention_bias": True}, "unknown field attention_bias"),
    ("mixtral", {"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e6, "factor": 4.0}},
     "rope type \"proportional\" is not supported"),
    ("mixtral", {"num_experts_per_tok": 5}, "num_experts_per_tok (5) must be between 1 and num_local_experts (4)"),
    ("mixtral", {"num_experts": 8}, "num_local_experts (4) and num_experts (8) disagree"),
    ("mixtral", {"num_local_experts": "4"}, "num_local_experts must be an integer"),
    ("qwen2_moe", {"hidden_act": "gelu_fast"}, "hidden_act: \"gelu_fast\" is not supported"),
    ("qwen2_moe", {"use_sliding_window": True}, "use_sliding_window: true is not supported"),
    ("qwen2_moe", {"decoder_sparse_step": 0}, "decoder_sparse_step must be a positive integer"),
    ("qwen2_moe", {"mlp_only_layers": "0"}, "mlp_only_layers: \"0\" is not supported"),
    ("qwen2_moe", {"qkv_bias": "yes"}, "qkv_bias must be true or false"),
    ("qwen3_moe", {"norm_topk_prob": 1}, "norm_topk_prob must be true or false"),
    ("qwen3_moe", {"num_local_experts": 0}, "num_experts_per_tok (2) must be between 1 and num_experts (0)"),
    ("olmoe", {"clip_qkv": 8.0}, "clip_qkv: 8.0 is not supported"),
    ("olmoe", {"head_dim": 16}, "unknown field head_dim"),
    ("phimoe", {"num_experts_per_tok": 3}, "num_experts_per_tok: 3 is not supported"),
    ("phimoe", {"router_jitter_noise": -0.1}, "router_jitter_noise must be at least 0"),
    ("phimoe", {"lm_head_bias": "yes"}, "lm_head_bias must be true or false"),
    ("phimoe", {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 4,
                                    "long_factor": [1.0] * 4, "long_mscale": 1.2, "original_max_position_embeddings": 20}},
     "short_mscale must be a number"),
    ("phimoe", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}},
     "rope type \"yarn\" is not supported"),
    ("phimoe", {"mlp_bias": True}, "unknown field mlp_bias"),
    ("gpt_oss", {"swiglu_alpha": 1.5}, "swiglu_alpha: 1.5 is not supported"),
    ("gpt_oss", {"swiglu_limit": 0.0}, "swiglu_limit must be positive"),
    ("gpt_oss", {"mlp_bias": True}, "unknown field mlp_bias"),
    ("gpt_oss", {"layer_types": ["full_attention"]}, "layer_types gives 1 layers; num_hidden_layers is 3"),
    ("gpt_oss", {"quantization_config": {"quant_method": "gptq", "bits": 4}},
     "quantization_config: {\"quant_method\": \"gptq\", \"bits\": 4} is not supported"),
    ("mixtral", {"quantization_config": {"quant_method": "mxfp4"}}, "quantization_config: {\"quant_method\": \"mxfp4\"} is not"),
    ("gpt_oss", {"num_experts_per_tok": 5}, "num_experts_per_tok (5) must be between 1 and num_local_experts (4)")])
def test_unsupported_or_malformed_configs_are_refused_by_name(case, change, needle, cli, tmp_path):
    config_class, _, fields = CASES[case]
    config = json.loads(getattr(transformers, config_class)(**SHAPE | fields).to_json_string()) | change
    assert_config_refused(cli, tmp_path, config, needle)


def test_gpt_oss_published_fields_transformers_ignores_import(cli, tmp_path):
    """gpt-oss-20b's config.json carries experts_per_token and initial_context_length from OpenAI's
    own format, which transformers never reads: imported, listed as ignored."""
    config_class, _, fields = CASES["gpt_oss"]
    config = json.loads(getattr(transformers, config_class)(**SHAPE | fields).to_json_string()) | {
        "experts_per_token": 2, "initial_context_length": 10}
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    assert "experts_per_token" in (tmp_path / "ours" / "spec.yaml").read_text().split("name:")[0]


MXFP4 = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                            "model.embed_tokens", "lm_head"]}
"""gpt-oss-20b's quantization_config as published."""
GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
"""e2m1's magnitudes, codes 0-7 (8-15 the same, negative)."""


def mxfp4_packed(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An expert matrix (E, in, out) as the OCP MXFP4 format stores it, packed here independently of
    tfspec: per group of 32 inputs of one output, the power of two 2^e bringing its largest magnitude
    within 6, each value rounded to the nearest e2m1 code (sign bit 3), two codes a byte, the even one
    low. Returns blocks (E, out, in / 32, 16), scales e + 127 (E, out, in / 32), and the values they hold."""
    x = w.transpose(1, 2).reshape(w.shape[0], w.shape[2], -1, 32)
    exponent = torch.ceil(torch.log2(x.abs().amax(-1).clamp_min(1e-30) / 6.0)).clamp(-127, 127)
    y = x / torch.exp2(exponent)[..., None]
    code = (y.abs()[..., None] - GRID).abs().argmin(-1)
    values = torch.where(y < 0, -GRID[code], GRID[code]) * torch.exp2(exponent)[..., None]
    code = (code + 8 * (y < 0)).to(torch.uint8)
    return (code[..., 0::2] | code[..., 1::2] << 4, (exponent + 127).to(torch.uint8),
            values.reshape(w.shape[0], w.shape[2], -1).transpose(1, 2))


def save_mxfp4(path):
    """A small gpt-oss (experts 64 wide: MXFP4 packs inputs 32 at a time) written as published: experts
    as MXFP4 blocks and scales, the rest float32, quantization_config mxfp4; returns transformers'
    GptOssForCausalLM loading that directory, dequantizing on the CPU."""
    from safetensors.torch import save_file

    config_class, model_class, fields = CASES["gpt_oss"]
    model = save_random(model_class, getattr(transformers, config_class)(**SHAPE | fields | {"intermediate_size": 64}),
                        path)
    tensors = {}
    for name, value in model.state_dict().items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            tensors[name + "_blocks"], tensors[name + "_scales"], _ = mxfp4_packed(value)
        else:
            tensors[name] = value.contiguous()
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text()) | {"quantization_config": MXFP4}
    (path / "config.json").write_text(json.dumps(config))
    return model_class, transformers.GptOssForCausalLM.from_pretrained(
        path, quantization_config=transformers.Mxfp4Config(dequantize=True), dtype=torch.float32).eval()


def test_mxfp4_dequantizes_as_transformers():
    """tfspec's MXFP4 reading equals transformers' own dequantization (integrations/mxfp4.py) on every
    byte value and a spread of scales."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    from tfspec.interop.hf.mxfp4 import dequantize

    generator = torch.Generator().manual_seed(0)
    blocks = torch.randint(0, 256, (3, 40, 2, 16), dtype=torch.uint8, generator=generator)
    scales = torch.randint(100, 150, (3, 40, 2), dtype=torch.uint8, generator=generator)
    theirs = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
    np.testing.assert_array_equal(dequantize(blocks.numpy(), scales.numpy()), theirs.numpy())


def test_gpt_oss_published_mxfp4_weights_match_transformers(cli, tmp_path):
    """MXFP4 experts dequantized on import: logits in PyTorch and onnxruntime those of transformers
    loading the same directory (decoding is the unquantized gpt-oss test's), and export --format hf
    writes them back unquantized."""
    from tfspec.backends.onnx import OnnxModel

    model_class, ref = save_mxfp4(tmp_path / "hf")
    tokens, keep = right_padded(VOCAB, PAD)
    _, ours, want = assert_pytorch_import_matches(cli, tmp_path / "hf", ref, tokens, keep)
    assert cli("export", ours, "-o", tmp_path / "onnx")[0] == 0
    got = OnnxModel(tmp_path / "onnx", device="cpu").logits(tgt=tokens.numpy())
    np.testing.assert_allclose(got[keep.numpy()], want[keep].numpy(), atol=1e-4, rtol=0)
    assert_hf_round_trip(cli, tmp_path / "hf", ref, model_class, tokens, keep)


def test_mxfp4_blocks_without_scales_are_refused(cli, tmp_path):
    from safetensors.torch import load_file, save_file

    save_mxfp4(tmp_path / "hf")
    tensors = load_file(tmp_path / "hf" / "model.safetensors")
    del tensors["model.layers.0.mlp.experts.down_proj_scales"]
    save_file(tensors, tmp_path / "hf" / "model.safetensors", metadata={"format": "pt"})
    code, out, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and err.count("\n") == 1 and "'model.layers.0.mlp.experts.down_proj_blocks' has no" in err, err
    assert not (tmp_path / "ours").exists()
