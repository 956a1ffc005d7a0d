"""Embeddings narrower than d_model (``embed_projection``) and layers sharing weights
(``share_layers``): ELECTRA with embedding_size 16 under hidden 32, ALBERT with its factorised
embedding and layer groups, OPT with word_embed_proj_dim 16 under 32 (opt-350m's shape),
written by transformers at tiny sizes with perturbed weights and imported through the CLI.
Logits (or hidden states) equal transformers' within 1e-4 in PyTorch and onnxruntime, OPT
continues prompts as ``generate`` does, the default configurations count what transformers
counts, ``export --format hf`` gives the original outputs back, hand-written specs count
parameters by hand and FLOPs as torch's counter sees them, and bad fields get one error line."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
import yaml

from hf_checkpoints import (assert_config_imports_at_count, assert_decoder_import_matches, assert_hf_round_trip,
                            right_padded, save_random, transformers_count)
from tests.test_analysis_flops import counted
from tfspec import build_graph
from tfspec.analysis import analyze_params
from tfspec.analysis.flops import analyze_flops
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.spec import Spec, load_spec

transformers = pytest.importorskip("transformers")

VOCAB, POSITIONS = 100, 40
SMALL = dict(vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=POSITIONS, layer_norm_eps=1e-3)
"""Every encoder at d_model 32; layer_norm_eps off its default, so that ignoring it shows."""
CASES = {
    "electra": ("ElectraConfig", "ElectraModel", SMALL | dict(embedding_size=16, num_hidden_layers=2)),
    "electra-mlm": ("ElectraConfig", "ElectraForMaskedLM", SMALL | dict(embedding_size=16, num_hidden_layers=2)),
    # L = 4 applications in G = 2 groups of K = 2 layers: 8 layers unrolled, layers 2, 3 apply 0, 1 and 6, 7 apply 4, 5
    "albert-mlm": ("AlbertConfig", "AlbertForMaskedLM", SMALL | dict(
        embedding_size=16, num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2)),
    # one layer applied 3 times; embeddings as wide as the layers still go through the projection
    "albert": ("AlbertConfig", "AlbertModel", SMALL | dict(embedding_size=32, num_hidden_layers=3, hidden_act="relu")),
}
PAD = 0  # every encoder's pad_token_id


def save(case: str, path) -> torch.nn.Module:
    config_class, model_class, fields = CASES[case]
    return save_random(model_class, getattr(transformers, config_class)(**fields), path)


@torch.no_grad()
def outputs(model, tokens, keep) -> dict[str, torch.Tensor]:
    """transformers' outputs named as tfspec's ports."""
    out = model(input_ids=tokens, attention_mask=keep.long())
    if hasattr(out, "logits"):
        return {"logits": out.logits}
    pooled = {"pooled": out.pooler_output} if getattr(out, "pooler_output", None) is not None else {}
    return {"memory": out.last_hidden_state, **pooled}


def assert_close(got: dict, want: dict, keep) -> None:
    for name, value in want.items():
        ours = torch.as_tensor(np.asarray(got[name]))
        if value.dim() == 3:  # real tokens only: padded positions are compared nowhere
            ours, value = ours[keep], value[keep]
        torch.testing.assert_close(ours, value, atol=1e-4, rtol=0, msg=name)


@pytest.mark.parametrize("case", CASES)
@torch.no_grad()
def test_encoder_import_matches_transformers_in_pytorch_and_onnxruntime(case, cli, tmp_path):
    from tfspec.backends.onnx import OnnxModel

    ref = save(case, tmp_path / "hf")
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    tokens, keep = right_padded(VOCAB, PAD)
    want = outputs(ref, tokens, keep)
    assert_close(model.run({"src": tokens}, tuple(want)), want, keep)
    # parameters shared across layers are one tensor here, counted once, as transformers counts its own
    assert sum(p.numel() for p in model.parameters()) == ref.num_parameters()
    code, out, err = cli("export", tmp_path / "ours", "--weights", tmp_path / "ours" / "model.safetensors",
                         "-o", tmp_path / "onnx")
    assert code == 0, out + err
    onnx_model = OnnxModel(tmp_path / "onnx", device="cpu")
    for name in want:
        graph = "encoder" if name == "memory" else "model"
        got = onnx_model.run(graph, [name], {"src": tokens.numpy()})[0]
        assert_close({name: got}, {name: want[name]}, keep)
    # one initializer per layer transformers stores (ALBERT's 8 layers unrolled from 4 stored: 2 per group)
    stored = sum(name.endswith("query.weight") for name in ref.state_dict())
    initializers = onnx.load(str(tmp_path / "onnx" / "model.onnx")).graph.initializer
    assert sum(i.name.endswith("self_attn.w_qkv") for i in initializers) == stored


OPT = transformers.OPTConfig(vocab_size=VOCAB, hidden_size=32, word_embed_proj_dim=16, ffn_dim=64, num_hidden_layers=2,
                             num_attention_heads=4, max_position_embeddings=POSITIONS, do_layer_norm_before=False,
                             pad_token_id=1, bos_token_id=2, eos_token_id=2)
"""opt-350m's shape, shrunk: post-norm, no final norm, 16-wide embeddings under 32-wide layers."""


def test_opt_with_narrower_embeddings_matches_transformers_and_generates_alike(cli, tmp_path):
    ref = save_random("OPTForCausalLM", OPT, tmp_path / "hf")
    tokens, keep = right_padded(VOCAB, OPT.pad_token_id)
    assert_decoder_import_matches(cli, tmp_path / "hf", ref, tokens, keep, OPT.pad_token_id)


@pytest.mark.parametrize("config_class, changes, architecture", [
    ("AlbertConfig", {}, "AlbertModel"), ("AlbertConfig", {}, "AlbertForMaskedLM"),
    ("ElectraConfig", {}, "ElectraModel"), ("ElectraConfig", {}, "ElectraForMaskedLM"),
    ("OPTConfig", dict(word_embed_proj_dim=512, hidden_size=1024, ffn_dim=4096, num_hidden_layers=24,
                       num_attention_heads=16, do_layer_norm_before=False), "OPTForCausalLM")])
def test_default_config_imports_at_transformers_count(config_class, changes, architecture, cli, tmp_path):
    """AlbertConfig() is albert-xxlarge's shape (one layer applied 12 times), ElectraConfig()
    electra-small's (128-wide embeddings under 256), the OPT one opt-350m's."""
    config = getattr(transformers, config_class)(architectures=[architecture], **changes)
    assert_config_imports_at_count(cli, tmp_path / "hf", config, architecture)


@pytest.mark.parametrize("case, architecture", [("albert-mlm", "AlbertForMaskedLM"),
                                                ("electra-mlm", "AlbertForMaskedLM"), ("opt", "OPTForCausalLM")])
def test_hf_round_trip_gives_the_original_logits(case, architecture, cli, tmp_path):
    """An ELECTRA generator with narrower embeddings computes what ALBERT's masked LM computes
    with no layers shared (as one of equal sizes computes BERT's): it goes back as ALBERT."""
    original = save_random("OPTForCausalLM", OPT, tmp_path / "hf") if case == "opt" else save(case, tmp_path / "hf")
    tokens, keep = right_padded(VOCAB, OPT.pad_token_id if case == "opt" else PAD, seed=7)
    assert_hf_round_trip(cli, tmp_path / "hf", original, architecture, tokens, keep)


HAND = """\
family: encoder-only
vocab: 50
d_model: 32
heads: 4
d_ff: 64
positional: {kind: learned, max_len: 40}
segments: 2
embed_norm: true
head_transform: true
output_bias: true
embed_projection: {width: 16}
encoder: {layers: 6, block: [self_attention, ffn], share_layers: {cycle: 2, repeats: 3}}
"""
"""ALBERT's shape at d_model 32, embeddings 16 wide, two layers' weights applied three times each."""


def test_hand_written_spec_counts_parameters_by_hand_and_flops_per_application():
    spec = Spec.model_validate(yaml.safe_load(HAND))
    d, e, f, v = 32, 16, 64, 50
    embeddings = v * e + 40 * e + 2 * e + 2 * e + (e * d + d)  # tokens, positions, segments, norm, projection in
    layer = (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d  # attention, ffn, two norms
    head = (d * e + e) + 2 * e + v  # dense to the embeddings' width, its norm, the output bias (matrix tied)
    graph = build_graph(spec)
    assert analyze_params(graph).total == embeddings + 2 * layer + head
    n = 12  # torch's counter sees all six layer applications, the projection in and the 16-wide head
    assert counted(spec, n) == 2 * analyze_flops(graph, n).forward


def test_opt_shaped_spec_projects_tokens_and_back_by_hand():
    data = yaml.safe_load(HAND) | {
        "family": "decoder-only", "segments": 0, "embed_norm": False, "head_transform": False, "output_bias": False,
        "norm": "pre", "embed_projection": {"width": 16, "bias": False, "projects": "tokens", "out": "project"},
        "decoder": {"layers": 3, "block": ["causal_self_attention", "ffn"], "share_layers": {"repeats": 3}}}
    del data["encoder"]
    spec = Spec.model_validate(data)
    d, e, f, v = 32, 16, 64, 50
    layer = (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d
    # tokens, projection in, positions at d_model, one layer, final norm, projection out (the output is tied)
    assert analyze_params(build_graph(spec)).total == v * e + e * d + 40 * d + layer + 2 * d + d * e
    assert counted(spec, 12) == 2 * analyze_flops(build_graph(spec), 12).forward


BAD_SPECS = {
    "no way out": ("head_transform: true", "head_transform: false", "embed_projection.out: the token projection "
                   "reads width 16: set out: project"),
    "out with a head": ("{width: 16}", "{width: 16, out: tied}", "embed_projection.out: out: tied has nothing to do"),
    "repeats once": ("repeats: 3}", "repeats: 1}", "share_layers.repeats: repeats 1 applies each layer once"),
    "runs do not divide": ("cycle: 2", "cycle: 4", "do not split into runs of cycle x repeats = 4 x 3 = 12"),
    "universal too": ("share_layers:", "shared: true, share_layers:", "a shared (universal) stack already"),
    "wrong width": ("{width: 16}", "{width: 0}", "embed_projection.width"),
    "unknown key": ("{width: 16}", "{width: 16, project: tokens}", "did you mean 'projects'"),
}


@pytest.mark.parametrize("case", BAD_SPECS)
def test_bad_spec_fields_give_one_error_line(case, cli, tmp_path):
    old, new, needle = BAD_SPECS[case]
    assert old in HAND
    (tmp_path / "spec.yaml").write_text(HAND.replace(old, new))
    code, out, err = cli("validate", tmp_path / "spec.yaml")
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], out + err


def test_share_layers_between_different_blocks_is_refused(cli, tmp_path):
    text = HAND.replace("{layers: 6, block: [self_attention, ffn], share_layers: {cycle: 2, repeats: 3}}",
                        "{groups: [{layers: 2, block: [self_attention, ffn]}, {layers: 2, block: [self_attention]}],"
                        " share_layers: {cycle: 2, repeats: 2}}")
    (tmp_path / "spec.yaml").write_text(text)
    code, out, err = cli("validate", tmp_path / "spec.yaml")
    assert code == 2 and "layer 2 would apply layer 0's weights, but their blocks differ" in err, out + err


BAD_CONFIGS = [
    ("albert", {"num_hidden_groups": 2}, "num_hidden_groups: 2 is not supported with num_hidden_layers 3"),
    ("albert", {"num_hidden_groups": 3, "inner_group_num": 2}, "inner_group_num: 2 is not supported with "
                                                                "num_hidden_groups equal to num_hidden_layers (3)"),
    ("albert", {"inner_group_num": 0}, "inner_group_num must be at least 1, got 0"),
    ("albert", {"num_hidden_groups": "one"}, "num_hidden_groups must be an integer"),
    ("albert", {"net_structure_type": 1}, "net_structure_type: 1 is not supported"),
    ("electra", {"embedding_size": "small"}, "embedding_size must be an integer"),
    ("opt", {"word_embed_proj_dim": 16.5}, "word_embed_proj_dim must be an integer"),
    ("opt", {"do_layer_norm_before": "no"}, "do_layer_norm_before must be true or false"),
]


@pytest.mark.parametrize("case, change, needle", BAD_CONFIGS)
def test_bad_config_fields_give_one_error_line(case, change, needle, cli, tmp_path):
    config = OPT if case == "opt" else getattr(transformers, CASES[case][0])(**CASES[case][2])
    data = json.loads(config.to_json_string()) | {"model_type": config.model_type} | change
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(data))
    code, out, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], out + err
