"""The mixture-of-experts layer (``tfspec.layers.moe``) against transformers' Mixtral and
Qwen2-MoE blocks with the same weights, in PyTorch and through the ONNX export; its parameter
and FLOP counts by hand; the published Mixtral 8x7B size; and its spec errors."""

from __future__ import annotations

import pytest
import torch
import yaml

from tfspec import build_graph, load_spec
from tfspec.analysis.flops import analyze_flops
from tfspec.backends.onnx import export
from tfspec.backends.torch import RunContext, build_module
from tfspec.spec import Spec

transformers = pytest.importorskip("transformers")

D, F = 32, 48


def moe_spec(**moe) -> Spec:
    return Spec.model_validate({
        "name": "m", "family": "decoder-only", "vocab": 100, "d_model": D, "heads": 4, "d_ff": F, "dropout": 0.0,
        "norm": "pre", "norm_type": "rms", "gated": True, "activation": "silu", "bias": False,
        "positional": {"kind": "rotary", "max_len": 64},
        "decoder": {"layers": 2, "block": ["causal_self_attention", {"kind": "moe", **moe}]}})


def block(spec: Spec):
    """The first MoE module of the PyTorch model, its weights perturbed."""
    torch.manual_seed(0)
    model = build_module(spec)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model, dict(model.named_modules())["decoder.layers.0.moe"]


def load_experts(ref, ours, f: int) -> None:
    """transformers keeps gate and up projections as one (E, 2f, d) tensor."""
    with torch.no_grad():
        ref.gate.weight.copy_(ours.w_router)
        ref.experts.gate_up_proj.copy_(torch.cat([ours.w_1, ours.w_3], 1))
        ref.experts.down_proj.copy_(ours.w_2)


def test_mixtral_block_equals_transformers():
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    _, ours = block(moe_spec(experts=4, top_k=2))
    ref = MixtralSparseMoeBlock(transformers.MixtralConfig(hidden_size=D, intermediate_size=F, num_local_experts=4,
                                                          num_experts_per_tok=2)).eval()
    load_experts(ref, ours, F)
    x = torch.randn(3, 7, D)
    with torch.no_grad():
        torch.testing.assert_close(ours(RunContext(training=False, padding={}), x), ref(x), atol=1e-5, rtol=0)


def test_qwen2_moe_block_with_shared_gated_expert_equals_transformers():
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

    _, ours = block(moe_spec(experts=6, top_k=3, normalize=False, d_ff=24, shared=1, shared_d_ff=40,
                             shared_gate=True))
    config = transformers.Qwen2MoeConfig(hidden_size=D, moe_intermediate_size=24, shared_expert_intermediate_size=40,
                                         num_experts=6, num_experts_per_tok=3, norm_topk_prob=False)
    ref = Qwen2MoeSparseMoeBlock(config).eval()
    load_experts(ref, ours, 24)
    with torch.no_grad():
        ref.shared_expert.gate_proj.weight.copy_(ours.w_shared_1)
        ref.shared_expert.up_proj.weight.copy_(ours.w_shared_3)
        ref.shared_expert.down_proj.weight.copy_(ours.w_shared_2)
        ref.shared_expert_gate.weight.copy_(ours.w_shared_gate)
        x = torch.randn(2, 5, D)
        theirs = ref(x)
        theirs = theirs[0] if isinstance(theirs, tuple) else theirs
        torch.testing.assert_close(ours(RunContext(training=False, padding={}), x), theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("moe", [{"experts": 4, "top_k": 2},
                                 {"experts": 6, "top_k": 3, "normalize": False, "shared": 2, "shared_gate": True}],
                         ids=["mixtral-like", "shared-gated"])
def test_moe_exports_with_parity(moe, tmp_path):
    model, _ = block(moe_spec(**moe))
    result = export(model, tmp_path)
    assert result.ok, [str(c) for c in result.checks if not c.ok]


def test_moe_trains():
    """One optimiser step moves the router and the experts tokens were routed to (with top_k 2:
    a renormalised top-1 weight is always 1, which gives the router no gradient)."""
    model, moe = block(moe_spec(experts=4, top_k=2))
    before = {n: p.detach().clone() for n, p in moe.named_parameters()}
    logits = model(torch.randint(4, 100, (2, 9)))
    logits.logsumexp(-1).mean().backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    moved = {n for n, p in moe.named_parameters() if not torch.equal(p, before[n])}
    assert {"w_router", "w_1", "w_2", "w_3"} <= moved


def test_router_losses_equal_transformers_load_balancing_and_by_hand():
    """Training adds balance x transformers' load_balancing_loss_func (per token, so times the
    real tokens: the loss is a sum over tokens) plus z_loss x sum of logsumexp(logits)^2;
    padded positions count in neither."""
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    model, moe = block(moe_spec(experts=4, top_k=2, balance=0.5, z_loss=0.25))
    x = torch.randn(2, 6, D)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    ctx = RunContext(training=True, padding={"T": pad})
    moe(ctx, x)
    logits = (x.reshape(-1, D) @ moe.w_router.T)[~pad.reshape(-1)]
    balance = load_balancing_loss_func((logits,), 4, 2)
    z = torch.logsumexp(logits, -1).square().sum()
    torch.testing.assert_close(ctx.aux_losses[0], 0.5 * balance * 10 + 0.25 * z, rtol=1e-5, atol=0)


def test_counts_by_hand():
    spec = moe_spec(experts=8, top_k=2, shared=1, shared_gate=True)
    dense = Spec.model_validate(spec.model_dump() | {"decoder": {"layers": 2, "block": ["causal_self_attention", "ffn"]}})
    per_layer = 8 * 3 * D * F + 8 * D + 3 * D * F + D  # experts, router, one shared expert of width d_ff, its gate
    assert build_graph(spec).num_params - build_graph(dense).num_params == 2 * (per_layer - 3 * D * F)
    row = next(r for r in analyze_flops(build_graph(spec), n=10).layers if r.layer is not None and r.layer.kind == "moe")
    assert row.forward == 2 * 10 * D * 8 + 2 * 3 * 2 * 10 * D * F + 3 * 2 * 10 * D * F + 2 * 10 * D


def test_report_gives_active_parameters_by_hand(cli):
    """Mixtral 8x7B: each token runs 2 of 8 SwiGLU experts (3 x 4096 x 14336 each) in each of
    32 layers, so 6 experts per layer are idle: about 12.9B active, as Jiang et al. report."""
    import json

    code, out, _ = cli("report", "zoo/mixtral-8x7b", "--format", "json")
    params = json.loads(out)["params"]
    assert code == 0 and params["active"] == params["total"] - 32 * 6 * 3 * 4096 * 14336 == 12_879_925_248
    code, out, _ = cli("report", "zoo/mixtral-8x7b")
    assert "12,879,925,248 active per token" in out.splitlines()[0]


def test_mixtral_8x7b_has_transformers_count():
    spec = load_spec("zoo/mixtral-8x7b")
    config = transformers.MixtralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                                        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                        num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=32768,
                                        rope_theta=1e6, rms_norm_eps=1e-5, tie_word_embeddings=False)
    with torch.device("meta"):
        theirs = sum(p.numel() for p in transformers.MixtralForCausalLM(config).parameters())
    assert build_graph(spec).num_params == theirs


@pytest.mark.parametrize("moe,needles", [
    ({"experts": 4, "top_k": 5}, ["top_k (5) cannot exceed experts (4)"]),
    ({"experts": 4, "shared_gate": True}, ["shared_gate", "shared is 0"]),
    ({"experts": 0}, ["experts", "greater than or equal to 1"]),
    ({"experts": 4, "capacity": 2}, ["capacity (2) bounds top-1 routing", "top_k is 2"]),
    ({"experts": 4, "top_k": 1, "capacity": 0}, ["capacity", "greater than or equal to 1"]),
])
def test_bad_moe_fields_are_clear_errors(moe, needles, write_spec, cli):
    data = moe_spec(experts=2).model_dump(mode="json", exclude_defaults=True)
    data["decoder"] = {"layers": 1, "block": ["causal_self_attention", {"kind": "moe", **moe}]}
    code, _, err = cli("validate", write_spec(yaml.safe_dump(data)))
    assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
