"""The Image Transformer's local attention kinds (Parmar et al. 2018, §3.2) equal full
attention under their mask, in both backends and in ONNX, and count what they compute.

Masks are written here from the paper's definitions, not taken from the kinds' ``visible``:
local 1D cuts the sequence into query blocks of l_q positions, each seeing its block and the
l_m positions before it (and after it, unless causal).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfspec.analysis.flops import SYMBOLS, at
from tfspec.backends.torch import DecodeState, build_module
from tfspec.backends.torch.attention import self_attention
from tfspec.backends.torch.model import RunContext
from tfspec.layers.attention import use_blocks
from tfspec.layers.local1d import Local1dSelfAttention
from tfspec.layers.local2d import Local2dSelfAttention
from tfspec.spec import Spec


def local_1d_mask(n: int, block: int, memory: int, causal: bool) -> np.ndarray:
    """(n, n): query i sees key j, from §3.2's "Local 1D Attention", one query at a time."""
    mask = np.zeros((n, n), dtype=bool)
    for i in range(n):
        start = i - i % block
        last = i if causal else min(n - 1, start + block - 1 + memory)
        mask[i, max(0, start - memory):last + 1] = True
    return mask


def reference(q, k, v, visible, pad):
    """softmax(q k^T / sqrt(d) + mask) v in float64, one dense matrix."""
    B, L, h, d = q.shape
    visible = torch.as_tensor(visible)[None, None] & ~pad[:, None, None, :]
    scores = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) / d ** 0.5
    weights = torch.softmax(scores.masked_fill(~visible, -1e300), -1)
    return torch.einsum("bhqk,bkhd->bqhd", weights, v.double()).reshape(B, L, -1)


def padding(n: int) -> torch.Tensor:
    pad = torch.zeros(3, n, dtype=torch.bool)
    pad[1, n // 3:] = True
    pad[2, n - 5:] = True
    return pad


LOCAL_1D = [(4, 8, False, 150), (8, 16, True, 203), (16, 0, True, 100), (5, 5, False, 61), (32, 32, True, 400)]


@pytest.mark.parametrize("block,memory,causal,n", LOCAL_1D)
def test_local_1d_equals_masked_full_attention(block, memory, causal, n):
    torch.manual_seed(n)
    layer = Local1dSelfAttention(block=block, memory=memory, causal=causal)
    pad = padding(n)
    q, k, v = (torch.randn(3, n, 2, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ours = self_attention(RunContext(False, {"S": pad}), layer, "S", q, k, v, 0.0)
    ref = reference(q, k, v, local_1d_mask(n, block, memory, causal), pad)
    keep = ~pad
    assert torch.allclose(ours[keep], ref[keep], atol=1e-10)
    grads = torch.autograd.grad(ours[keep].sum(), (q, k, v))
    for g, e in zip(grads, torch.autograd.grad(ref[keep].sum(), (q, k, v))):
        assert torch.allclose(g, e, atol=1e-10)


@pytest.mark.parametrize("block,memory,causal", [(4, 8, False), (4, 8, True), (3, 0, False), (8, 24, True)])
def test_local_1d_pairs_count_the_mask(block, memory, causal):
    layer = Local1dSelfAttention(block=block, memory=memory, causal=causal)
    for n in (1, 3, 7, 16, 31, 64, 101):
        assert at(layer.pairs(SYMBOLS), n, {SYMBOLS.l_q: block, SYMBOLS.l_m: memory}) == \
            local_1d_mask(n, block, memory, causal).sum(), n


def lm_spec(layer: dict, max_len: int = 512) -> Spec:
    return Spec.model_validate({"name": "local", "family": "decoder-only", "vocab": 50, "d_model": 32, "heads": 2,
                                "dropout": 0.0, "positional": {"kind": "learned", "max_len": max_len},
                                "decoder": {"layers": 2, "block": [layer, "ffn"]}})


def encoder_spec(layer: dict, max_len: int = 512) -> Spec:
    return Spec.model_validate({"name": "local", "family": "encoder-only", "vocab": 50, "d_model": 32, "heads": 2,
                                "dropout": 0.0, "positional": {"kind": "learned", "max_len": max_len},
                                "encoder": {"layers": 2, "block": [layer, "ffn"]}})


def exported(model, tmp_path, opset=18):
    from tfspec.backends.onnx.exporter import export
    from tfspec.backends.onnx.runtime import OnnxModel

    result = export(model, tmp_path / "onnx", opset=opset)
    assert result.ok, result
    return OnnxModel(tmp_path / "onnx")


def assert_onnx_equals_pytorch(model, onnx_model, causal: bool, n: int) -> None:
    """Logits of three length-n sequences, one half padding, within 1e-4 at the real tokens."""
    tokens = torch.randint(4, 50, (3, n))
    tokens[0, n // 2:] = 0
    with torch.no_grad():
        expected = model(tokens).numpy()
    keep = (tokens != 0).numpy()
    ours = onnx_model.logits(**({"tgt": tokens.numpy()} if causal else {"src": tokens.numpy()}))
    assert np.abs(ours - expected)[keep].max() < 1e-4, n


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("causal", [False, True])
def test_local_1d_onnx_equals_pytorch(causal, opset, tmp_path):
    layer = {"kind": "local_1d_self_attention", "block": 8, "memory": 16, "causal": causal}
    torch.manual_seed(1)
    model = build_module((lm_spec if causal else encoder_spec)(layer)).eval()
    onnx_model = exported(model, tmp_path, opset)
    for n in (9, 200, 333):
        assert use_blocks(Local1dSelfAttention(**layer).band(), n) == (n > 9)
        assert_onnx_equals_pytorch(model, onnx_model, causal, n)


@pytest.mark.parametrize("layer", [Local1dSelfAttention(block=4, memory=4, causal=True),
                                   Local2dSelfAttention(block=(2, 2), memory=(1, 1), width=5, causal=True)],
                         ids=["1d", "2d"])
def test_local_decoding_drops_whole_blocks(layer, tmp_path):
    """The cache keeps the band rounded up to whole blocks (block rows in 2D), so block-aligned
    masks stay right: step-by-step log-probabilities equal the full pass in PyTorch and in the
    ONNX step graph."""
    torch.manual_seed(0)
    model = build_module(lm_spec(layer.model_dump())).eval()
    tokens = torch.randint(4, 50, (2, 30))
    state = DecodeState()
    decoder = exported(model, tmp_path).decoder()
    onnx_state = decoder.select(decoder.start(None), np.zeros(2, dtype=np.int64), cross=True)
    with torch.no_grad():
        full = torch.log_softmax(model(tokens), -1)
        for t in range(30):
            step = torch.log_softmax(model.run({"tgt": tokens[:, t:t + 1]}, state=state)["logits"], -1)
            assert torch.allclose(step[:, 0], full[:, t], atol=1e-5), t
            assert all(k.shape[2] == layer.kept(t + 1) < layer.band()[0] + layer.period for k, _ in state.cache.values())
            ours, onnx_state = decoder.run(onnx_state, tokens[:, t:t + 1].numpy(), ["log_probs"])
            assert np.abs(ours - full[:, t].numpy()).max() < 1e-4, t
    assert all(v.shape()[2] == layer.kept(30) for v in onnx_state.pasts.values())


def local_2d_mask(n: int, block, memory, width: int, causal: bool) -> np.ndarray:
    """(n, n) from §3.2's "Local 2D Attention": query (r, c) in the block whose top-left is
    (r - r % h, c - c % w) sees the pixels of that block widened by w_m columns each side and
    h_m rows above (and below, unless causal); when causal, none after it in raster order."""
    (h, w), (h_m, w_m) = block, memory
    mask = np.zeros((n, n), dtype=bool)
    for i in range(n):
        r, c = divmod(i, width)
        top, left = r - r % h, c - c % w
        for j in range(n):
            rk, ck = divmod(j, width)
            below = top + h - 1 + (0 if causal else h_m)
            mask[i, j] = top - h_m <= rk <= below and left - w_m <= ck <= left + w - 1 + w_m and (j <= i or not causal)
    return mask


LOCAL_2D = [((2, 3), (2, 1), 9, True, 100), ((2, 3), (2, 1), 9, False, 81), ((4, 4), (4, 4), 16, True, 256),
            ((2, 2), (1, 3), 7, False, 50), ((3, 4), (0, 0), 12, True, 37), ((1, 8), (3, 8), 24, True, 24 * 6)]


@pytest.mark.parametrize("block,memory,width,causal,n", LOCAL_2D)
def test_local_2d_equals_masked_full_attention(block, memory, width, causal, n):
    torch.manual_seed(n)
    layer = Local2dSelfAttention(block=block, memory=memory, width=width, causal=causal)
    pad = padding(n)
    q, k, v = (torch.randn(3, n, 2, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ours = self_attention(RunContext(False, {"S": pad}), layer, "S", q, k, v, 0.0)
    ref = reference(q, k, v, local_2d_mask(n, block, memory, width, causal), pad)
    keep = ~pad
    assert torch.allclose(ours[keep], ref[keep], atol=1e-10)
    grads = torch.autograd.grad(ours[keep].sum(), (q, k, v))
    for g, e in zip(grads, torch.autograd.grad(ref[keep].sum(), (q, k, v))):
        assert torch.allclose(g, e, atol=1e-10)
    unpadded = self_attention(RunContext(False, {}), layer, "S", q, k, v, 0.0)
    assert torch.allclose(unpadded, reference(q, k, v, local_2d_mask(n, block, memory, width, causal), pad & False))


@pytest.mark.parametrize("block,memory,width,causal", [((2, 3), (2, 1), 9, True), ((2, 2), (1, 3), 8, False),
                                                       ((4, 4), (0, 0), 8, True), ((2, 4), (3, 4), 12, False)])
def test_local_2d_pairs_count_the_mask(block, memory, width, causal):
    """Exact for whole block rows (images whose height is a multiple of h)."""
    layer = Local2dSelfAttention(block=block, memory=memory, width=width, causal=causal)
    for rows in (4, 8, 12):
        n = rows * width
        assert at(layer.pairs(SYMBOLS), n, {}) == local_2d_mask(n, block, memory, width, causal).sum(), n


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("causal", [False, True])
def test_local_2d_onnx_equals_pytorch(causal, opset, tmp_path):
    layer = {"kind": "local_2d_self_attention", "block": [2, 4], "memory": [2, 3], "width": 12, "causal": causal}
    torch.manual_seed(1)
    model = build_module((lm_spec if causal else encoder_spec)(layer)).eval()
    onnx_model = exported(model, tmp_path, opset)
    for n in (5, 12 * 8, 12 * 9 + 5, 333):
        assert_onnx_equals_pytorch(model, onnx_model, causal, n)


HEIGHT, WIDTH, CHANNELS = 6, 10, 3
"""Not square: a model that swaps rows and columns (or reads the raster column by column) differs."""


def image_spec(**changes) -> Spec:
    """6 x 10 RGB images of 16 levels; local 2D then local 1D layers, the 2D width from the image."""
    spec = {"name": "image", "family": "decoder-only",
            "image": {"height": HEIGHT, "width": WIDTH, "channels": CHANNELS, "levels": 16},
            "vocab": {"size": 17, "pad_id": 16, "bos_id": 16, "eos_id": 16, "unk_id": 16}, "d_model": 32,
            "heads": 2, "d_ff": 64, "dropout": 0.0, "positional": {"kind": "none"},
            "decoder": {"groups": [
                {"layers": 1, "block": [{"kind": "local_2d_self_attention", "block": [2, 6], "memory": [2, 3],
                                         "causal": True}, "ffn"]},
                {"layers": 1, "block": [{"kind": "local_1d_self_attention", "block": 8, "memory": 16,
                                         "causal": True}, "ffn"]}]}}
    return Spec.model_validate(spec | changes)


def test_image_model_is_causal():
    """Changing a later intensity never changes an earlier position's distribution."""
    torch.manual_seed(0)
    model = build_module(image_spec()).eval()
    tokens = torch.randint(0, 16, (2, HEIGHT * WIDTH * CHANNELS))
    with torch.no_grad():
        logits = model(tokens)
        for j in (0, 5, 24, 100, 179):
            changed = tokens.clone()
            changed[:, j] = (tokens[:, j] + 1) % 16
            moved = model(changed)
            assert torch.equal(moved[:, :j], logits[:, :j]), j
            assert not torch.equal(moved[:, j], logits[:, j]), j


def test_image_positions_are_row_column_and_channel_embeddings(tmp_path):
    """Position p of the raster (row, column, channel) adds rows[r] + columns[c] + channels[k]
    (Image Transformer §3.1), written here from numpy's row-major unravelling; parameters count
    the three tables; ONNX equals PyTorch on whole and partial images."""
    from tfspec.analysis.params import analyze_params

    spec = image_spec()
    torch.manual_seed(0)
    model = build_module(spec).eval()
    params = dict(model.named_parameters())
    tables = [params[f"decoder.pos.{axis}"] for axis in ("rows", "columns", "channels")]
    assert [tuple(t.shape) for t in tables] == [(HEIGHT, 32), (WIDTH, 32), (CHANNELS, 32)]
    added = []  # what the position module adds to its input (ctx, x)
    hook = model.get_submodule("decoder.pos").register_forward_hook(lambda _, args, out: added.append(out - args[1]))
    with torch.no_grad():
        model(torch.randint(0, 16, (2, HEIGHT * WIDTH * CHANNELS)))
    hook.remove()
    r, c, k = np.unravel_index(np.arange(HEIGHT * WIDTH * CHANNELS), (HEIGHT, WIDTH, CHANNELS))
    expected = tables[0][r] + tables[1][c] + tables[2][k]
    assert torch.allclose(added[0], expected.expand_as(added[0]), atol=1e-6)
    assert analyze_params(model.graph).total == sum(p.numel() for p in model.parameters())
    onnx_model = exported(model, tmp_path)
    for n in (HEIGHT * WIDTH * CHANNELS, 100):
        tokens = torch.randint(0, 16, (2, n))
        with torch.no_grad():
            expected = model(tokens).numpy()
        assert np.abs(onnx_model.logits(tgt=tokens.numpy()) - expected).max() < 1e-4, n
    with pytest.raises(Exception, match="longer than the image"):
        model(torch.randint(0, 16, (1, HEIGHT * WIDTH * CHANNELS + 1)))


@pytest.mark.parametrize("changes,message", [
    ({"positional": {"kind": "learned"}}, "positional: {kind: none}"),
    ({"vocab": 16}, r"vocab.size \(16\) must exceed image.levels \(16\)"),
    ({"vocab": {"size": 18, "pad_id": 16, "bos_id": 1, "eos_id": 17, "unk_id": 17}}, "vocab.bos_id .1. is an intensity"),
    ({"image": None}, "needs the image row length"),
])
def test_image_spec_errors_say_what_to_change(changes, message):
    with pytest.raises(ValueError, match=message):
        image_spec(**changes)
