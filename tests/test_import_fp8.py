"""Block-scaled FP8 checkpoints (DeepSeek-V3 as published, issue 51, 15) against transformers' own
dequantization (``integrations/finegrained_fp8.py``): float8 e4m3fn codes read as torch reads them,
blocks scaled bit for bit as ``Fp8Dequantize`` scales them (and, for a grid whose last blocks are
cut short, as its ``_dequantize_fp8_weight``), a small random DeepSeek-V3 whose projections
transformers' ``Fp8Quantize`` turned into real fp8 tensors and scales imported to the weights and
logits transformers computes from the dequantized tensors, counted as transformers counts the
dequantized model; malformed fp8 checkpoints and settings refused with one error line."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
import torch

from hf_checkpoints import assert_config_refused, assert_pytorch_import_matches, right_padded, save_random
from tfspec.interop.hf import fp8
from tfspec.tensors import E4M3

transformers = pytest.importorskip("transformers")
finegrained = pytest.importorskip("transformers.integrations.finegrained_fp8")

BLOCK = [8, 8]
"""The tiny model's blocks (DeepSeek-V3's are 128 x 128: its matrices would be one block each)."""
SETTINGS = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": BLOCK}
"""DeepSeek-V3's quantization_config as published, but for the block size."""
SHAPE = dict(vocab_size=90, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=4, max_position_embeddings=40, pad_token_id=1, bos_token_id=2, eos_token_id=3,
             n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=24, kv_lora_rank=16, q_lora_rank=24,
             qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=12, first_k_dense_replace=1, n_shared_experts=1,
             n_group=4, topk_group=2)
"""Every projection a whole number of 8 x 8 blocks but kv_a_proj_with_mqa (20 rows), which
transformers' quantizer leaves unquantized, as DeepSeek-V3 leaves its embeddings, norms, routers
and lm_head."""


def codes(shape, seed: int) -> torch.Tensor:
    """Random float8 e4m3fn values, every code but the NaNs."""
    raw = torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    return torch.where((raw & 0x7F) == 0x7F, raw - 1, raw).view(torch.float8_e4m3fn)


def test_e4m3_codes_read_as_torch_reads_them():
    torch_values = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    np.testing.assert_array_equal(E4M3, torch_values)
    assert np.array_equal(np.signbit(E4M3), np.signbit(torch_values))  # -0.0 too


@pytest.mark.parametrize("shape,block", [((48, 64), (16, 32)), ((3, 24, 16), (8, 8)), ((16, 8), (16, 8))])
def test_blocks_are_scaled_as_transformers_scales_them(shape, block):
    """Bit for bit ``Fp8Dequantize._dequantize_one`` (what loading a pre-quantized checkpoint runs),
    a stack of experts' matrices included."""
    weight = codes(shape, 0)
    scales = torch.rand((*shape[:-2], shape[-2] // block[0], shape[-1] // block[1]),
                        generator=torch.Generator().manual_seed(1)) * 1e-2
    theirs = finegrained.Fp8Dequantize(None)._dequantize_one(weight, scales, output_dtype=torch.float32)
    ours = fp8.dequantize(E4M3[weight.view(torch.uint8).numpy()], scales.numpy(), block)
    np.testing.assert_array_equal(ours, theirs.numpy())


def test_a_grid_cut_short_is_scaled_as_transformers_scales_it():
    """DeepSeek-V3's kv_a_proj_with_mqa (576 rows of 128-row blocks: 5, the last half full): its
    rows and columns past the last whole block take that block's scale, as transformers'
    ``_dequantize_fp8_weight`` (and DeepSeek's own kernel) read it."""
    weight, block = codes((20, 28), 2), (8, 8)
    scales = torch.rand((3, 4), generator=torch.Generator().manual_seed(3))
    theirs = finegrained._dequantize_fp8_weight(weight, scales, list(block), torch.float32)
    np.testing.assert_array_equal(fp8.dequantize(E4M3[weight.view(torch.uint8).numpy()], scales.numpy(), block),
                                  theirs.numpy())


def save_fp8(path):
    """A small random DeepSeek-V3 written as DeepSeek publishes V3: each projection transformers'
    ``Fp8Quantize`` turns into float8 blocks beside its ``weight_scale_inv``, the rest float32,
    quantization_config fp8. Returns transformers' model loading the same tensors as
    ``Fp8Dequantize`` dequantizes them (float32), and those tensors by name."""
    from safetensors.torch import load_file, save_file

    config = transformers.DeepseekV3Config(**SHAPE)
    save_random("DeepseekV3ForCausalLM", config, path)
    quantizer = finegrained.Fp8Quantize(types.SimpleNamespace(
        quantization_config=transformers.FineGrainedFP8Config(weight_block_size=tuple(BLOCK))))
    stored, dequantized = {}, {}
    for name, value in load_file(path / "model.safetensors").items():
        parts = quantizer._quantize_one(name, value) if name.endswith("proj.weight") else {name: value}
        stored |= parts
        scales = parts.get(name.removesuffix(".weight") + ".weight_scale_inv")
        dequantized[name] = value if scales is None else finegrained.Fp8Dequantize(None)._dequantize_one(
            parts[name], scales, output_dtype=torch.float32)
    assert any(v.dtype == torch.float8_e4m3fn for v in stored.values())
    save_file(stored, path / "model.safetensors", metadata={"format": "pt"})
    written = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(written | {"quantization_config": SETTINGS}))
    plain = path.with_name("dequantized")
    config.save_pretrained(plain)
    save_file(dequantized, plain / "model.safetensors", metadata={"format": "pt"})
    return transformers.DeepseekV3ForCausalLM.from_pretrained(plain).eval(), dequantized


@torch.no_grad()
def test_deepseek_v3_fp8_checkpoint_imports_as_transformers_dequantizes_it(cli, tmp_path):
    """Logits of the import transformers' at the real tokens; in bfloat16 the written tensors are
    transformers' dequantized ones bit for bit; the count is the dequantized model's (the scales
    are no parameters of it), the dense layer's projections and the experts' alike."""
    from safetensors.torch import load_file

    ref, dequantized = save_fp8(tmp_path / "hf")
    tokens, keep = right_padded(90, 1)
    _, ours, _ = assert_pytorch_import_matches(cli, tmp_path / "hf", ref, tokens, keep)
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "bf16", "--dtype", "bfloat16", "--quiet")
    assert code == 0, err
    written = load_file(tmp_path / "bf16" / "model.safetensors")
    projections = {"w_o": "o_proj", "w_kvb": "kv_b_proj", "w_qa": "q_a_proj"}
    pairs = {f"decoder.layers.{i}.self_attn.{ours_name}": f"model.layers.{i}.self_attn.{theirs}.weight"
             for i in range(2) for ours_name, theirs in projections.items()}
    pairs["decoder.layers.0.ffn.w_2"] = "model.layers.0.mlp.down_proj.weight"
    for name, theirs in pairs.items():
        assert torch.equal(written[name], dequantized[theirs].to(torch.bfloat16)), name
    code, out, _ = cli("report", ours, "--format", "json")
    params = json.loads(out)["params"]
    with torch.device("meta"):
        model = transformers.DeepseekV3ForCausalLM(transformers.AutoConfig.from_pretrained(tmp_path / "hf"))
        model = finegrained.replace_with_fp8_linear(
            model, quantization_config=transformers.FineGrainedFP8Config(dequantize=True), pre_quantized=True)
    assert code == 0 and params.get("transformers", params)["total"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("change,needle", [
    ({"activation_scheme": "static"}, 'activation_scheme "static" is not supported'),
    ({"scale_fmt": "ue8m0"}, 'scale_fmt "ue8m0" is not supported'),
    ({"weight_block_size": [128]}, "weight_block_size must be two positive integers"),
    ({"group_size": 64}, "unknown setting group_size"),
])
def test_fp8_settings_tfspec_does_not_read_are_refused_by_name(change, needle, cli, tmp_path):
    config = json.loads(transformers.DeepseekV3Config(**SHAPE).to_json_string())
    assert_config_refused(cli, tmp_path, config | {"quantization_config": SETTINGS | change}, needle)


def test_fp8_is_refused_where_no_published_checkpoint_uses_it(cli, tmp_path):
    config = json.loads(transformers.LlamaConfig(hidden_size=32, num_attention_heads=4).to_json_string())
    assert_config_refused(cli, tmp_path, config | {"quantization_config": SETTINGS},
                          "is not supported; tfspec imports Llama unquantized")


@pytest.mark.parametrize("damage,needle", [
    ("scales-only", "has no 'model.layers.0.self_attn.o_proj.weight'"),
    ("wrong-grid", "are not fp8 blocks of 8 x 8"),
])
def test_a_damaged_fp8_checkpoint_is_one_error_line(damage, needle, cli, tmp_path):
    from safetensors.torch import load_file, save_file

    save_fp8(tmp_path / "hf")
    tensors = load_file(tmp_path / "hf" / "model.safetensors")
    name = "model.layers.0.self_attn.o_proj.weight"
    if damage == "scales-only":
        del tensors[name]
    else:
        tensors[name + "_scale_inv"] = tensors[name + "_scale_inv"][:-1]
    save_file(tensors, tmp_path / "hf" / "model.safetensors", metadata={"format": "pt"})
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert not (tmp_path / "ours").exists()
