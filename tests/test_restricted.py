"""Restricted attention computed block by block equals masked full attention, in both backends.

The reference is written here from §4's definition (position i attends to j with |i - j| <= r,
or i - r <= j <= i when causal; padded keys hidden), as one dense float64 softmax.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfspec.backends.torch import build_module
from tfspec.backends.torch.attention import banded_attention
from tfspec.backends.torch.model import RunContext
from tfspec.layers.attention import block_plan, use_blocks
from tfspec.layers.restricted import RestrictedSelfAttention
from tfspec.spec import Spec


def reference(q, k, v, r, causal, pad):
    """softmax(q k^T / sqrt(d) + mask) v with the band mask built from the definition."""
    B, L, h, d = q.shape
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    visible = (j >= i - r) & (j <= (i if causal else i + r))
    visible = visible[None, None] & ~pad[:, None, None, :]
    scores = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) / d ** 0.5
    weights = torch.softmax(scores.masked_fill(~visible, -1e300), -1)
    return torch.einsum("bhqk,bkhd->bqhd", weights, v.double()).reshape(B, L, -1)


CASES = [(1, False, 97), (7, True, 200), (40, False, 333), (64, False, 1000), (64, True, 777), (100, False, 450)]


@pytest.mark.parametrize("r,causal,n", CASES)
def test_blocks_equal_masked_reference_forward_and_backward(r, causal, n):
    torch.manual_seed(r + n)
    layer = RestrictedSelfAttention(r=r, causal=causal)
    pad = torch.zeros(3, n, dtype=torch.bool)
    pad[1, n // 3:] = True
    pad[2, n - 5:] = True
    q, k, v = (torch.randn(3, n, 2, 16, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ctx = RunContext(False, {"S": pad})
    ours = banded_attention(ctx, layer, "S", q, k, v, 0.0)
    keep = ~pad
    ref = reference(q, k, v, r, causal, pad)
    assert torch.allclose(ours[keep], ref[keep], atol=1e-10)
    grads = torch.autograd.grad(ours[keep].sum(), (q, k, v))
    expected = torch.autograd.grad(ref[keep].sum(), (q, k, v))
    for g, e in zip(grads, expected):
        assert torch.allclose(g, e, atol=1e-10)


def test_the_band_bounds_what_the_kind_sees():
    """``band`` must contain ``visible``: blocks would silently drop keys otherwise."""
    for layer in (RestrictedSelfAttention(r=3), RestrictedSelfAttention(r=5, causal=True)):
        behind, ahead = layer.band()
        q, k = np.arange(50)[:, None], np.arange(50)[None, :]
        seen = layer.visible(q, k)
        assert not (seen & ((k < q - behind) | (k > q + ahead))).any()
        assert seen[25, 25 - behind] and seen[25, 25 + ahead]


def spec_with(block, d=32, max_len=1200, family="encoder-only") -> Spec:
    return Spec.model_validate({"name": "band", "family": family, "vocab": 50, "d_model": d, "heads": 2, "dropout": 0.0,
                                "positional": {"kind": "sinusoidal", "max_len": max_len},
                                "encoder": {"layers": 2, "block": block}})


@pytest.mark.parametrize("causal", [False, True])
def test_module_uses_blocks_on_long_inputs_and_trains_the_same(causal, monkeypatch):
    """A whole encoder (with padding and dropout off): blocks vs the dense masked path."""
    spec = spec_with([{"kind": "restricted_self_attention", "r": 5, "causal": causal}, "ffn"])
    torch.manual_seed(0)
    model = build_module(spec).train()
    n = 300
    assert use_blocks(spec.encoder.block[0].band(), n)
    tokens = torch.randint(4, 50, (2, n))
    tokens[1, 123:] = 0
    keep = tokens != 0

    def loss_and_grads():
        model.zero_grad()
        logits = model(tokens)
        logits[keep].logsumexp(-1).sum().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters()]

    blocked, blocked_grads = loss_and_grads()
    monkeypatch.setattr("tfspec.backends.torch.attention.use_blocks", lambda band, n: False)
    dense, dense_grads = loss_and_grads()
    assert torch.allclose(blocked[keep], dense[keep], atol=2e-5)
    for g, e in zip(blocked_grads, dense_grads):
        assert torch.allclose(g, e, atol=2e-4)


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("r,causal", [(3, False), (40, True), (64, False)])
def test_onnx_blocks_equal_pytorch_with_padding(r, causal, opset, tmp_path):
    from tfspec.backends.onnx.exporter import export
    from tfspec.backends.onnx.runtime import OnnxModel

    torch.manual_seed(1)
    model = build_module(spec_with([{"kind": "restricted_self_attention", "r": r, "causal": causal}, "ffn"])).eval()
    result = export(model, tmp_path / "onnx", opset=opset)
    assert result.ok, result
    onnx_model = OnnxModel(tmp_path / "onnx")
    for n in (9, 3 * block_plan((r, r))[0] + 1, 700):
        tokens = torch.randint(4, 50, (3, n))
        tokens[0, n // 2:] = 0
        tokens[2, n - 3:] = 0
        with torch.no_grad():
            expected = model(tokens).numpy()
        keep = (tokens != 0).numpy()
        ours = onnx_model.logits(src=tokens.numpy())
        assert np.abs(ours - expected)[keep].max() < 1e-4, n


def test_computed_score_count_follows_the_blocks():
    """Dense FLOPs of a banded kind count the scores its kernels compute: n^2 up to three
    blocks, then blocks x w x W."""
    from tfspec.analysis.flops import SYMBOLS

    layer = RestrictedSelfAttention(r=64)
    pairs = layer.computed_pairs(SYMBOLS)
    assert int(pairs.subs(SYMBOLS.n, 100)) == 100 * 100
    assert int(pairs.subs(SYMBOLS.n, 1000)) == 16 * 64 * 192  # ceil(1000 / 64) blocks of 64 x (3 x 64)


def test_measure_fits_exponents_and_knows_the_analytic_ones():
    """``table1 --measure``'s arithmetic: slopes of log-log data, and each kind's degrees in n
    and d read off its Table 1 class (timings themselves belong in benchmarks, not tests)."""
    from tfspec.analysis.measure import expected_exponents, fit_exponent
    from tfspec.analysis.table1 import single_layer
    from tfspec.paper import TABLE1
    from tfspec.spec import load_spec

    sizes = [256, 512, 1024, 2048]
    assert fit_exponent(sizes, [3e-9 * n ** 2 + 1e-3 * (n == 256) for n in sizes]) == pytest.approx(2.0, abs=1e-6)
    expected = {"Self-Attention": (2, 1), "Recurrent": (1, 2), "Convolutional": (1, 2),
                "Self-Attention (restricted)": (1, 1), "Convolutional (separable)": (1, 2)}
    for row in TABLE1:
        if row.label in expected:
            assert expected_exponents(single_layer(load_spec(row.spec))) == expected[row.label], row.label


def test_table1_measure_runs_from_the_cli_and_plots(cli, monkeypatch, tmp_path):
    from tfspec.cli import analysis

    for name, value in (("NS", (64, 128, 256)), ("DS", (32, 64, 128)), ("N_FOR_D", 64), ("D_FOR_N", 32),
                        ("BUDGET", 0.0)):
        monkeypatch.setattr(f"tfspec.analysis.measure.{name}", value)
    code, out, _ = cli("table1", "--measure")
    assert code == 0
    assert "measured on" in out and "n: measured" in out
    # Each row: the paper's class, its degrees in n and d (by hand), and exponents that are the slopes
    # of the printed times' logs over the 3 lengths (recomputed here, within the rounding of the print).
    degrees = {"Self-Attention": ("O(n²·d)", 2, 1), "Recurrent": ("O(n·d²)", 1, 2),
               "Convolutional": ("O(k·n·d²)", 1, 2), "Self-Attention (restricted)": ("O(r·n·d)", 1, 1),
               "Convolutional (contiguous)": ("O(k·n·d²)", 1, 2),
               "Convolutional (separable)": ("O(k·n·d + n·d²)", 1, 2)}
    rows = [line for line in out.split("measured on")[-1].splitlines() if line.split("  ")[0] in degrees]
    assert len(rows) == len(degrees)
    for line in rows:
        label, complexity, in_n, fitted_n, in_d, _, _, *ms = [c.strip() for c in line.split("  ") if c.strip()]
        assert (complexity, int(in_n), int(in_d)) == degrees[label], line
        slope = np.polyfit(np.log([64, 128, 256]), np.log([float(t) for t in ms]), 1)[0]
        assert float(fitted_n) == pytest.approx(slope, abs=0.03), line
    pytest.importorskip("matplotlib")
    measured = analysis._measure(False)
    monkeypatch.setattr(analysis, "_measure", lambda verbose: measured)
    code, out, _ = cli("plot", "--measure", "-o", tmp_path / "measured.png")
    assert code == 0 and (tmp_path / "measured.png").stat().st_size > 10_000


def test_decoding_keeps_only_the_band_of_past_keys(tmp_path):
    """A causal restricted layer's cache holds its r newest keys, in PyTorch and in the ONNX
    step graph, and step-by-step log-probabilities still equal the full forward pass."""
    from tfspec.backends.onnx.runtime import OnnxModel
    from tfspec.backends.torch import DecodeState

    spec = Spec.model_validate({"name": "lm", "family": "decoder-only", "vocab": 50, "d_model": 32, "heads": 2,
                                "dropout": 0.0, "positional": {"kind": "sinusoidal", "max_len": 64},
                                "decoder": {"layers": 2, "block": [{"kind": "restricted_self_attention", "r": 3,
                                                                    "causal": True}, "ffn"]}})
    torch.manual_seed(0)
    model = build_module(spec).eval()
    tokens = torch.randint(4, 50, (2, 20))
    state = DecodeState()
    decoder = OnnxModel(_exported(model, tmp_path)).decoder()
    onnx_state = decoder.start(None)
    onnx_state = decoder.select(onnx_state, np.zeros(2, dtype=np.int64), cross=True)
    with torch.no_grad():
        full = torch.log_softmax(model(tokens), -1)
        for t in range(20):
            step = torch.log_softmax(model.run({"tgt": tokens[:, t:t + 1]}, state=state)["logits"], -1)
            assert torch.allclose(step[:, 0], full[:, t], atol=1e-5)
            assert all(k.shape[2] == min(t + 1, 3) for k, _ in state.cache.values())
            ours, onnx_state = decoder.run(onnx_state, tokens[:, t:t + 1].numpy(), ["log_probs"])
            assert np.abs(ours - full[:, t].numpy()).max() < 1e-4
    assert all(v.shape()[2] == 3 for v in onnx_state.pasts.values())


def _exported(model, tmp_path):
    from tfspec.backends.onnx.exporter import export

    result = export(model, tmp_path / "onnx")
    assert result.ok, result
    return tmp_path / "onnx"
