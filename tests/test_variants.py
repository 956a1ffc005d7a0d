"""The variant zoo against independent references: published parameter counts, rotary positions
as complex rotations (Su et al. 2021), relative positions and additive attention computed from
their papers' formulas by hand, masked-LM batches, and one training run per family."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from tfspec import build_graph, load_spec
from tfspec.analysis.flops import analyze_flops
from tfspec.analysis.paths import stack_paths
from tfspec.backends.torch import build_module
from tfspec.backends.torch.positions.rotary import rotary
from tfspec.backends.torch.model import RunContext
from tfspec.backends.torch.training import Pairs, TrainConfig, train
from tfspec.backends.torch.training.batches import masked
from tfspec.spec import Spec
from tests.conftest import SHIPPED

# Parameter counts of the released checkpoints (transformers' GPT2Model / BertModel with pooler).
PUBLISHED = {"zoo/gpt2": 124_439_808, "zoo/gpt2-medium": 354_823_168, "zoo/bert-base": 109_482_240,
             "zoo/bert-base-mlm": 109_514_298,
             "zoo/bert-large": 335_141_888}


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_models_have_their_published_parameter_counts(name):
    assert build_graph(load_spec(name)).num_params == PUBLISHED[name]


def test_rotary_is_a_complex_rotation_and_depends_on_distance_only():
    """RoFormer §3.4.2: pairs (x_i, x_{i+d/2}) as complex numbers, times exp(i m theta_i)."""
    torch.manual_seed(0)
    x = torch.randn(1, 7, 2, 8, dtype=torch.float64)
    ours = rotary(x, 3, 10000.0)
    theta = 10000.0 ** (-np.arange(4) * 2 / 8)
    z = x[..., :4].numpy() + 1j * x[..., 4:].numpy()
    m = np.arange(3, 10)[None, :, None, None]
    expected = z * np.exp(1j * m * theta)
    assert np.allclose(ours[..., :4].numpy(), expected.real) and np.allclose(ours[..., 4:].numpy(), expected.imag)
    q, k = torch.randn(1, 1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 1, 8, dtype=torch.float64)
    score = [(rotary(q, m, 1e4) * rotary(k, n, 1e4)).sum().item() for m, n in ((5, 2), (105, 102), (3, 0))]
    assert score[0] == pytest.approx(score[1]) == pytest.approx(score[2])


def one_layer(positional, score="dot", causal=False) -> torch.nn.Module:
    """A single-head attention module, d = 2, whose Q, K, V and output projections are identities."""
    kind = "causal_self_attention" if causal else "self_attention"
    spec = Spec.model_validate({"name": "one", "family": "decoder-only" if causal else "encoder-only",
                                "vocab": 10, "d_model": 2, "heads": 1, "positional": positional,
                                ("decoder" if causal else "encoder"): {"layers": 1, "block": [{"kind": kind,
                                                                                               "score": score}]}})
    model = build_module(spec)
    attn = model.get_submodule(("decoder" if causal else "encoder") + ".layers.0.self_attn")
    with torch.no_grad():
        attn.w_qkv.copy_(torch.eye(2).repeat(3, 1))
        attn.b_qkv.zero_()
        attn.w_o.copy_(torch.eye(2))
        attn.b_o.zero_()
    return attn.double()


def test_relative_positions_follow_shaw_et_al():
    """eq. 4: e_ij = x_i (x_j + a^K_ij) / sqrt(d); eq. 3: z_i = sum_j a_ij (x_j + a^V_ij), with
    a_ij the embedding of clip(j - i, -k, k); here k = 1, computed by loops."""
    attn = one_layer({"kind": "relative", "max_distance": 1})
    x = torch.tensor([[[1.0, 0.5], [-0.3, 2.0], [0.7, -1.1], [0.2, 0.4]]], dtype=torch.float64)
    with torch.no_grad():
        attn.rel_k.copy_(torch.tensor([[0.3, -0.2], [0.0, 0.1], [-0.5, 0.4]]))
        attn.rel_v.copy_(torch.tensor([[1.0, 2.0], [-1.0, 0.5], [0.25, -0.75]]))
        ours = attn(RunContext(False, {}), x)[0]
    aK, aV, xs = attn.rel_k.detach().numpy(), attn.rel_v.detach().numpy(), x[0].numpy()
    for i in range(4):
        e = [xs[i] @ (xs[j] + aK[min(max(j - i, -1), 1) + 1]) / math.sqrt(2) for j in range(4)]
        a = np.exp(e) / np.exp(e).sum()
        z = sum(a[j] * (xs[j] + aV[min(max(j - i, -1), 1) + 1]) for j in range(4))
        assert np.allclose(ours[i].numpy(), z)


@pytest.mark.parametrize("causal", [False, True])
def test_additive_attention_is_w_tanh_q_plus_k(causal):
    """Bahdanau et al.: e_ij = w · tanh(q_i + k_j) (the projections W_a, U_a are our W^Q, W^K)."""
    attn = one_layer({"kind": "sinusoidal"}, score="additive", causal=causal)
    x = torch.tensor([[[1.0, 0.5], [-0.3, 2.0], [0.7, -1.1]]], dtype=torch.float64)
    with torch.no_grad():
        attn.w_score.copy_(torch.tensor([[0.8, -1.3]]))
        ours = attn(RunContext(False, {}), x)[0]
    w, xs = attn.w_score.detach().numpy()[0], x[0].numpy()
    for i in range(3):
        keys = range(i + 1) if causal else range(3)
        e = np.array([w @ np.tanh(xs[i] + xs[j]) for j in keys])
        a = np.exp(e) / np.exp(e).sum()
        assert np.allclose(ours[i].numpy(), sum(a[n] * xs[j] for n, j in enumerate(keys)))


def test_masked_lm_batches_mask_fifteen_percent_like_bert():
    rng = np.random.default_rng(0)
    src = [np.append(rng.integers(4, 100, rng.integers(5, 40)), 2).astype(np.int32) for _ in range(400)]
    pairs = Pairs(src, src)
    batch = masked(pairs, np.arange(400), pad=0, mask_id=3, vocab=100, seed=[0, 1, 2])
    again = masked(pairs, np.arange(400), pad=0, mask_id=3, vocab=100, seed=[0, 1, 2])
    assert torch.equal(batch["src"], again["src"])  # the seed decides: resumed runs and ranks agree
    original = torch.nn.utils.rnn.pad_sequence([torch.from_numpy(s).long() for s in src], batch_first=True)
    chosen = batch["tgt_out"] != 0
    tokens = int((original != 0).sum() - len(src))  # EOS is never chosen
    assert chosen.sum() / tokens == pytest.approx(0.15, abs=0.01)
    assert torch.equal(batch["tgt_out"][chosen], original[chosen])
    assert not chosen[original == 2].any()
    shown = batch["src"][chosen]
    assert (shown == 3).float().mean() == pytest.approx(0.8, abs=0.03)
    assert (shown == original[chosen]).float().mean() == pytest.approx(0.1 + 0.1 / 96, abs=0.03)
    assert torch.equal(batch["src"][~chosen], original[~chosen])


FAMILIES = {
    "encoder-decoder, relative positions": {"positional": {"kind": "relative", "max_distance": 4}},
    "decoder-only, rotary, pre-norm": {"family": "decoder-only", "norm": "pre", "positional": {"kind": "rotary"},
                                       "encoder": None,
                                       "decoder": {"layers": 2, "block": ["causal_self_attention", "ffn"]}},
    "LSTM encoder-decoder, additive attention": {
        "positional": "none", "heads": 1,
        "encoder": {"layers": 1, "block": [{"kind": "recurrent", "cell": "lstm", "bidirectional": True}]},
        "decoder": {"layers": 1, "block": [{"kind": "recurrent", "cell": "lstm"},
                                           {"kind": "cross_attention", "score": "additive"}, "ffn"]}},
    "convolutional encoder-decoder (ConvS2S-style)": {
        "positional": {"kind": "learned", "max_len": 64},
        "encoder": {"layers": 2, "block": [{"kind": "conv", "kernel": 3}]},
        "decoder": {"layers": 2, "block": [{"kind": "conv", "kernel": 3, "causal": True}, "cross_attention"]}},
    "universal, adaptive computation time": {"encoder": {"layers": 3, "block": ["self_attention", "ffn"],
                                                         "shared": True, "act": {"penalty": 0.01}},
                                             "decoder": {"layers": 3, "block": ["causal_self_attention",
                                                                                "cross_attention", "ffn"],
                                                         "shared": True, "act": {"penalty": 0.01}}},
    "encoder-only (masked LM), BERT-style": {"family": "encoder-only", "segments": 2, "embed_norm": True,
                                             "pooler": True, "positional": {"kind": "learned", "max_len": 64},
                                             "decoder": None, "activation": "gelu"},
}


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_learns_on_a_tiny_corpus(family, tmp_path):
    rng = np.random.default_rng(0)
    src, tgt = [], []
    for _ in range(96):  # two words, each repeated: every family can infer most tokens from the rest
        words = np.repeat(rng.integers(4, 40, 2), rng.integers(2, 6, 2))
        src.append(np.append(words, 2).astype(np.int32))
        tgt.append(np.concatenate([[1], words, [2]]).astype(np.int32))
    data = {"name": "fam", "vocab": 64, "d_model": 32, "heads": 4, "d_ff": 64, "dropout": 0.0,
            "label_smoothing": 0.0, "encoder": {"layers": 2, "block": ["self_attention", "ffn"]},
            "decoder": {"layers": 2, "block": ["causal_self_attention", "cross_attention", "ffn"]}}
    spec = Spec.model_validate({k: v for k, v in (data | FAMILIES[family]).items() if v is not None})
    config = TrainConfig(steps=40, batch_tokens=300, warmup=10, lr_scale=0.5, save_every=40, log_every=1)
    train(spec, Pairs(src, tgt), tmp_path, config, torch.device("cpu"), progress=False, log=lambda m: None)
    losses = [json.loads(line)["nll"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert np.mean(losses[-8:]) < np.mean(losses[:8]) - 0.5, losses


def graves_act(p: np.ndarray, threshold: float) -> tuple[np.ndarray, int, float]:
    """Graves (2016), §2: N = min{n: sum_{t<=n} p_t >= threshold} (capped at the last step),
    weights p_t before N and the remainder R = 1 - sum_{t<N} p_t at N; returns (weights, N, R)."""
    total, weights = 0.0, np.zeros(len(p))
    for n, pn in enumerate(p):
        if total + pn > threshold or n == len(p) - 1:
            weights[n] = 1 - total
            return weights, n + 1, 1 - total
        weights[n], total = pn, total + pn
    raise AssertionError("unreachable")


def test_adaptive_computation_time_follows_graves():
    steps, threshold = 5, 0.9
    spec = Spec.model_validate({"name": "ut", "family": "encoder-only", "vocab": 10, "d_model": 4, "heads": 1,
                                "encoder": {"layers": steps, "block": ["ffn"], "shared": True,
                                            "act": {"threshold": threshold, "penalty": 0.0}}})
    model = build_module(spec).double()
    acts = [model.get_submodule(f"encoder.layers.{t}.act") for t in range(steps)]
    with torch.no_grad():  # p_t = sigmoid(s_t[0]): the test picks every halting probability
        acts[0].w_halt.copy_(torch.tensor([[1.0, 0, 0, 0]]))
        acts[0].b_halt.zero_()
    assert all(a.w_halt is acts[0].w_halt for a in acts)  # one halting unit, shared by the steps
    rng = np.random.default_rng(0)
    p = rng.uniform(0.05, 0.6, (3, 7, steps))
    ys = torch.from_numpy(rng.normal(size=(steps, 3, 7, 4)))
    packed, ctx = None, RunContext(False, {})
    for t in range(steps):
        s = torch.zeros(3, 7, 4, dtype=torch.float64)
        s[..., 0] = torch.from_numpy(np.log(p[..., t] / (1 - p[..., t])))
        with torch.no_grad():
            packed = acts[t](ctx, s, ys[t]) if packed is None else acts[t](ctx, s, ys[t], packed)
    for b in range(3):
        for i in range(7):
            weights, n, remainder = graves_act(p[b, i], threshold)
            expected = sum(w * ys[t, b, i].numpy() for t, w in enumerate(weights))
            assert np.allclose(packed[b, i, :4].numpy(), expected)
            assert packed[b, i, 5].item() == pytest.approx(remainder) and packed[b, i, 6].item() == n


def test_universal_stack_shares_one_layer_across_depth():
    graph = build_graph(load_spec("zoo/universal"))
    one_step = graph.params["encoder.layers.0.ffn.w_1"]
    assert graph.tied()["encoder.layers.5.ffn.w_1"] == one_step.name
    # By hand: one encoder layer and one decoder layer of the base model (biased projections, post-norm:
    # no final norm), one halting unit w·s + b per stack, and the one shared 37000 x 512 embedding.
    d, d_ff = 512, 2048
    attention, ffn, norm = 4 * (d * d + d), 2 * d * d_ff + d_ff + d, 2 * d
    one_layer_each = (attention + ffn + 2 * norm) + (2 * attention + ffn + 3 * norm)
    assert graph.num_params == 37000 * d + one_layer_each + 2 * (d + 1)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_spec_has_a_complete_report(name, cli):
    """With test_onnx's parity over SHIPPED and test_params' module counts: every spec in specs/
    validates, compiles in both backends and analyses completely."""
    code, out, _ = cli("report", name, "--format", "json")
    assert code == 0
    report = json.loads(out)
    spec = load_spec(name)
    assert report["params"]["total"] == sum(p.numel() for p in build_module(spec, device="meta").parameters())
    assert report["flops"]["forward_per_sequence"] == analyze_flops(build_graph(spec), 25).forward > 0  # default n
    for row in report["layers"]:
        if row["layer"] not in ("projection", "pooler", "act", "dense"):  # ops that are not layer kinds
            assert row["complexity"].startswith("O(") and row["sequential_ops"]["class"], row
    assert set(report["paths"]) == {stack for stack, _ in spec.stacks}
    for stack, layers in spec.stacks:
        paths = stack_paths([layer.resolved(spec) for _, layer in layers.sublayers()], 25)
        assert (report["paths"][stack]["max_path_length"], report["paths"][stack]["reach"]) == (paths.longest,
                                                                                              paths.reach)
