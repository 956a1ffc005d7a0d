"""Position variants from x-transformers as tfspec position options named after what they compute
(issue 57, part D): xPos is rotary's ``decay_length`` (Sun et al. 2022), dynamic position bias is
the ``distance_mlp`` position kind (Wang et al. 2021, CrossFormer).

References: x-transformers 2.31.10 on the same weights (``tests/xtransformers_reference.py``), in
PyTorch, KV-cached decoding and onnxruntime; the papers' equations written out in numpy; parameter
counts against x-transformers' own; the training-memory estimate against autograd's saved tensors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from tests import xtransformers_reference as ref
from tests.test_train_memory_ops import LENGTH, ROWS, measured
from tests.xtransformers_reference import DIM_HEAD, HEADS, MAX_LEN, Case, check_cached, check_onnx, check_torch
from tfspec import build_graph
from tfspec.analysis import train_memory
from tfspec.analysis.complexity import table1_complexity
from tfspec.analysis.flops import SYMBOLS, analyze_flops, op_flops
from tfspec.analysis.kvcache import analyze_kv_cache
from tfspec.analysis.params import analyze_params
from tfspec.backends.torch import build_module
from tfspec.layers.attention import fused_kernel

# --- xPos: rotary's decay_length ---------------------------------------------------------------


def interleaved_to_halves(rotated: int) -> torch.Tensor:
    """Row order of one head taking x-transformers' rotary layout (pairs of adjacent features,
    ``rotate_half`` over ``(d r), r=2``) to tfspec's (feature i paired with i + r/2): the same
    permutation of queries and keys leaves q·k unchanged."""
    order = list(range(0, rotated, 2)) + list(range(1, rotated, 2)) + list(range(rotated, DIM_HEAD))
    return torch.tensor(order)


def rotary_hook(rotated: int):
    """Queries' and keys' rows of every head in tfspec's layout (``interleaved_to_halves``)."""
    order = torch.cat([interleaved_to_halves(rotated) + head * DIM_HEAD for head in range(HEADS)])

    def hook(a, copier, prefix):
        copier.set(f"{prefix}.w_qkv", torch.cat([a.to_q.weight[order], a.to_k.weight[order], a.to_v.weight]))
    return ref.attention_hook(hook)


def xpos(decay: float | None = 4.0, rotated: int = DIM_HEAD // 2, max_len: int = MAX_LEN) -> Case:
    """x-transformers' rotary (``rotary_xpos`` with ``decay``; its default rotates dim_head // 2
    features) beside tfspec's rotary of the same fraction, with ``decay_length``."""
    options = {"rotary_pos_emb": True, "rotary_emb_dim": rotated}
    if decay is not None:
        options |= {"rotary_xpos": True, "rotary_xpos_scale_base": decay}
    positional = {"kind": "rotary", "max_len": max_len, "fraction": rotated / DIM_HEAD, "decay_length": decay}
    return Case(options, spec={"positional": positional}, hooks=(rotary_hook(rotated),))


def xpos_logits_by_the_paper(tf, ids: torch.Tensor, decay: float, rotated: int) -> np.ndarray:
    """The decoder's logits with every attention's scores written out from the paper (Sun et al.
    2022, eq. 9-10): q_n k_m summed over rotated pairs i as Re[(q_i e^{i n theta_i} zeta_i^{n/g})
    conj(k_i e^{i m theta_i} zeta_i^{-m/g})], uncentred, plus the unrotated features' products."""
    half = rotated // 2
    theta = 10000.0 ** (-np.arange(half) * 2.0 / rotated)
    zeta = (np.arange(0, rotated, 2) / rotated + 0.4) / 1.4
    n = ids.shape[1]
    pos = np.arange(n)
    relative = (pos[:, None] - pos[None, :])[..., None]  # (n, n, 1): n - m per pair

    def scores(q, k):  # (h, n, d) each
        qc = q[..., :half] + 1j * q[..., half:rotated]
        kc = k[..., :half] + 1j * k[..., half:rotated]
        pair = qc[:, :, None] * np.conj(kc[:, None]) * np.exp(1j * relative * theta) * zeta ** (relative / decay)
        return pair.real.sum(-1) + q[..., rotated:] @ k[..., rotated:].transpose(0, 2, 1)

    return written_out(tf, ids, scores)


def written_out(tf, ids: torch.Tensor, scores, bias=None) -> np.ndarray:
    """tfspec's decoder run in numpy with each attention's (h, n, n) logits from ``scores(q, k)``
    (unscaled products, times d_k^-1/2 here) plus ``bias(layer)``: the reference loop of the
    papers' equations over tfspec's weights (pre-norm LayerNorm without bias, GELU FFN)."""
    p = {k: v.detach().double().numpy() for k, v in tf.state_dict().items()}
    n = ids.shape[1]
    causal = np.tril(np.ones((n, n), bool))

    def norm(x, w):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * w

    rows = []
    for row in ids.numpy():
        x = p["decoder.embed.weight"][row]
        for layer in range(ref.DEPTH):
            a = f"decoder.layers.{layer}.self_attn"
            qkv = norm(x, p[f"{a}_norm.weight"]) @ p[f"{a}.w_qkv"].T
            q, k, v = (t.reshape(n, HEADS, DIM_HEAD).transpose(1, 0, 2) for t in np.split(qkv, 3, -1))
            logits = scores(q, k) * DIM_HEAD ** -0.5 + (0 if bias is None else bias(p, a, x))
            logits = np.where(causal, logits, -np.inf)
            w = np.exp(logits - logits.max(-1, keepdims=True))
            w /= w.sum(-1, keepdims=True)
            x = x + (w @ v).transpose(1, 0, 2).reshape(n, -1) @ p[f"{a}.w_o"].T
            f = f"decoder.layers.{layer}.ffn"
            hidden = norm(x, p[f"{f}_norm.weight"]) @ p[f"{f}.w_1"].T + p[f"{f}.b_1"]
            hidden = torch.nn.functional.gelu(torch.from_numpy(hidden)).numpy()
            x = x + hidden @ p[f"{f}.w_2"].T + p[f"{f}.b_2"]
        rows.append(norm(x, p["decoder.norm.weight"]) @ p["output.weight"].T)
    return np.stack(rows)


@pytest.mark.parametrize("rotated", [DIM_HEAD // 2, DIM_HEAD])
def test_xpos_matches_x_transformers_in_pytorch_and_cached_steps(rotated):
    check_torch(xpos(rotated=rotated))
    check_cached(xpos(rotated=rotated))


def test_xpos_matches_x_transformers_in_onnx(tmp_path):
    check_onnx(xpos(512.0), tmp_path)


def test_xpos_is_the_papers_uncentred_scale():
    """x-transformers and tfspec centre the scale (on the call's middle, on max_len // 2); the
    paper does not: the centre cancels, so the logits equal eq. 9-10 written out uncentred."""
    _, tf = ref.pair(xpos(3.0, rotated=DIM_HEAD))
    ids = ref.tokens()
    want = xpos_logits_by_the_paper(tf, ids, 3.0, DIM_HEAD)
    np.testing.assert_allclose(ref.logits_tf(tf, ids), want, atol=ref.TOLERANCE, rtol=0)


def test_xpos_changes_the_logits_of_plain_rotary():
    """The decay is not a no-op: x-transformers' xPos off its plain rotary, tfspec's off its own."""
    ids = ref.tokens()
    xt, tf = ref.pair(xpos())
    xt_plain, tf_plain = ref.pair(xpos(None))
    assert np.abs(ref.logits_xt(xt, ids) - ref.logits_xt(xt_plain, ids)).max() > 1e-3
    assert np.abs(ref.logits_tf(tf, ids) - ref.logits_tf(tf_plain, ids)).max() > 1e-3
    np.testing.assert_allclose(ref.logits_tf(tf_plain, ids), ref.logits_xt(xt_plain, ids), atol=ref.TOLERANCE)


def test_xpos_adds_no_parameters_flops_or_cache_and_keeps_fused_kernels():
    """Parameters as x-transformers counts them; FLOPs, Table 1 and the KV cache those of plain
    rotary (elementwise scales only: the cache holds the scaled keys); the fused kernels apply."""
    with_decay, plain = (build_graph(ref.spec(xpos(d))) for d in (4.0, None))
    torch.manual_seed(0)
    assert analyze_params(with_decay).total == sum(p.numel() for p in ref.xt_model(xpos()).parameters())
    assert analyze_flops(with_decay, 9).forward == analyze_flops(plain, 9).forward
    assert analyze_kv_cache(with_decay, 9).at_n == analyze_kv_cache(plain, 9).at_n
    for node in (n for n in with_decay.nodes() if n.op == "attention"):
        assert fused_kernel(node)
        assert table1_complexity(node.layer) == "O(n²·d)"


def test_xpos_training_memory_adds_what_autograd_keeps():
    """``report --train``: xPos doubles rotary's saved tables (the queries' scaled cos and sin, the
    keys'), one set per call shared by the layers: what xPos adds to each attention's declared
    bytes equals what it adds to autograd's (``test_train_memory_ops.measured``)."""
    sizes, added = {"B": ROWS, "S": LENGTH, "T": LENGTH}, []
    for decay in (8.0, None):
        graph = build_graph(ref.spec(xpos(decay, rotated=DIM_HEAD, max_len=2 * LENGTH)))
        got, shared, rows = measured(build_module(graph).train(), graph), set(), []
        for node in (n for n in graph.nodes() if n.op == "attention"):
            saved = train_memory._saved(graph, node, sizes)
            declared = sum(v for k, v in saved.items() if not (k.startswith("positions#") and k in shared))
            shared |= {k for k in saved if k.startswith("positions#")}
            rows.append((declared, got[node.name]))
        added.append(rows)
    for (declared, kept), (plain_declared, plain_kept) in zip(*added):
        assert declared - plain_declared == kept - plain_kept
    assert added[0][0][0] - added[1][0][0] == 2 * 4 * LENGTH * DIM_HEAD // 2  # two more (L, r/2) float32 tables


def test_xpos_refusals():
    """Bidirectional attention (the decay would grow for keys ahead), a scale past float32's safe
    range, and latent attention (its shared rotary key part) are refused naming decay_length."""
    with pytest.raises(ValidationError, match="decay_length"):
        ref.spec(Case(family="encoder-only", spec={"positional": {"kind": "rotary", "decay_length": 512.0,
                                                                   "max_len": 64}}))
    with pytest.raises(ValidationError, match="decay_length"):
        ref.spec(xpos(512.0, max_len=1 << 16))
    ref.spec(xpos(2048.0, max_len=1 << 16))
    latent = {"kind": "latent_attention", "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
              "v_head_dim": 8}
    with pytest.raises(ValidationError, match="decay_length"):
        ref.spec(Case(spec={"positional": {"kind": "rotary", "decay_length": 8.0, "max_len": 16},
                            "decoder": {"layers": 1, "block": [latent, "ffn"]}}))


# --- dynamic position bias: the distance_mlp position kind --------------------------------------


def copy_distance_mlp(xt, copier, family="decoder-only"):
    """x-transformers' one stack-wide DynamicPositionBias copied into every layer's own MLP
    (CrossFormer gives each block its own; the copies make the two models equal)."""
    layers = list(xt.attn_layers.rel_pos.mlp)
    for layer in ref.xt_layers(xt, family):
        if layer.type != "a":
            continue
        for k, hidden in enumerate(layers[:-1]):
            linear = hidden[0]
            copier.set(f"{layer.prefix}.dpb_w{k}", linear.weight)
            copier.set(f"{layer.prefix}.dpb_b{k}", linear.bias)
        copier.set(f"{layer.prefix}.dpb_w_out", layers[-1].weight)
        copier.set(f"{layer.prefix}.dpb_b_out", layers[-1].bias)


def distance_mlp(log: bool = False, family: str = "decoder-only", **fields) -> Case:
    """x-transformers' ``dynamic_pos_bias`` (depth 2, SiLU, no norm, width dim // 4) beside the
    distance_mlp kind set to compute the same."""
    options = {"dynamic_pos_bias": True, "dynamic_pos_bias_log_distance": log, "dynamic_pos_bias_mlp_depth": 2}
    positional = {"kind": "distance_mlp", "max_len": MAX_LEN, "mlp_depth": 2, "mlp_norm": False,
                  "mlp_activation": "silu", "log_distance": log} | fields
    return Case(options, family=family, spec={"positional": positional}, hooks=(copy_distance_mlp,))


@pytest.mark.parametrize("log", [False, True])
def test_distance_mlp_matches_x_transformers_in_pytorch_and_cached_steps(log):
    check_torch(distance_mlp(log))
    check_cached(distance_mlp(log))


@pytest.mark.parametrize("family", ["decoder-only", "encoder-only"])
def test_distance_mlp_matches_x_transformers_in_onnx(family, tmp_path):
    check_torch(distance_mlp(True, family))
    check_onnx(distance_mlp(True, family), tmp_path)


def test_distance_mlp_changes_the_logits():
    ref.differs(distance_mlp())


def mlp_by_the_paper(p, a, distance: np.ndarray, depth: int) -> np.ndarray:
    """CrossFormer's DPB (§3.3, Fig. 3): depth x (Linear, LayerNorm, ReLU), then Linear to heads."""
    x = distance[..., None].astype(np.float64)
    for k in range(depth):
        x = x @ p[f"{a}.dpb_w{k}"].T + p[f"{a}.dpb_b{k}"]
        x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
        x = np.maximum(x * p[f"{a}.dpb_g{k}"] + p[f"{a}.dpb_s{k}"], 0)
    return x @ p[f"{a}.dpb_w_out"].T + p[f"{a}.dpb_b_out"]


def test_distance_mlp_defaults_are_crossformers_dpb():
    """The defaults (three hidden layers, LayerNorm, ReLU, each layer its own MLP; x-transformers'
    norm option puts a bias-free norm on its first layer only) against the paper written out."""
    spec = ref.spec(Case(spec={"positional": {"kind": "distance_mlp", "max_len": MAX_LEN}}))
    tf = build_module(spec).eval()
    torch.manual_seed(3)
    with torch.no_grad():
        for p in tf.parameters():
            p.normal_(0.0, 0.4)
    ids = ref.tokens()
    n = ids.shape[1]
    relative = np.arange(n)[:, None] - np.arange(n)[None, :]

    def bias(p, a, x):
        return mlp_by_the_paper(p, a, relative, 3).transpose(2, 0, 1)  # (h, n, n)

    def scores(q, k):
        return q @ k.transpose(0, 2, 1)

    want = written_out(tf, ids, scores, bias)
    np.testing.assert_allclose(ref.logits_tf(tf, ids), want, atol=ref.TOLERANCE, rtol=0)


def mlp_flops(n: int, w: int = ref.DIM // 4, depth: int = 2) -> int:
    return 2 * (2 * n - 1) * (w + (depth - 1) * w * w + w * HEADS)


def test_distance_mlp_parameters_and_flops_against_x_transformers():
    """x-transformers holds one MLP per stack, tfspec one per layer: the parameters differ by the
    other layers' copies; x-transformers runs its MLP again in every layer, so the FLOPs (torch's
    counter over x-transformers, math kernel) are equal."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    case, n = distance_mlp(), 9
    torch.manual_seed(0)
    xt, graph = ref.xt_model(case), build_graph(ref.spec(case))
    shared = sum(p.numel() for p in xt.attn_layers.rel_pos.parameters())
    assert analyze_params(graph).total == sum(p.numel() for p in xt.parameters()) + (ref.DEPTH - 1) * shared
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        xt(ref.tokens(1, n))
    assert analyze_flops(graph, n).forward == counter.get_total_flops()
    assert op_flops(next(x for x in graph.nodes() if x.op == "attention"))["distance_mlp"].subs(
        {SYMBOLS.n: n, SYMBOLS.d: ref.DIM, SYMBOLS.h: HEADS}) == mlp_flops(n)


def test_distance_mlp_table1_cache_and_kernels():
    """Table 1 unchanged (the MLP runs over 2n - 1 distances, not n^2 pairs), the KV cache that of
    plain attention, the scores spelled out (the bias rules the fused kernels out)."""
    graph, plain = build_graph(ref.spec(distance_mlp())), build_graph(ref.spec(Case()))
    assert analyze_kv_cache(graph, 9).at_n == analyze_kv_cache(plain, 9).at_n
    for node in (n for n in graph.nodes() if n.op == "attention"):
        assert not fused_kernel(node)
        assert table1_complexity(node.layer) == "O(n²·d)"


@pytest.mark.parametrize("fields", [{}, {"mlp_norm": False, "mlp_activation": "silu", "mlp_depth": 1}])
def test_distance_mlp_training_memory_adds_what_autograd_keeps(fields):
    """What each layer's MLP and its gather keep (``saved_by_layer``) is what autograd keeps beyond
    ALiBi's spelled-out attention, which keeps the same weights and no bias tensors."""
    sizes, length = {"B": ROWS, "S": LENGTH, "T": LENGTH}, LENGTH
    kept = {}
    for positional in ({"kind": "distance_mlp", **fields}, {"kind": "alibi"}):
        graph = build_graph(ref.spec(Case(spec={"positional": positional | {"max_len": 2 * length}})))
        got = measured(build_module(graph).train(), graph)
        kept[positional["kind"]] = [(got[n.name], train_memory._saved(graph, n, sizes)) for n in graph.nodes()
                                    if n.op == "attention"]
    for (got, saved), (alibi_got, _) in zip(kept["distance_mlp"], kept["alibi"]):
        declared = next(v for k, v in saved.items() if k.endswith("#positions"))
        assert got - alibi_got == declared


def test_distance_mlp_refusals():
    with pytest.raises(ValidationError, match="mlp_depth"):
        ref.spec(Case(spec={"positional": {"kind": "distance_mlp", "mlp_depth": 0}}))
    with pytest.raises(ValidationError, match="mlp_width shapes distance_mlp positions, but kind is rotary"):
        ref.spec(Case(spec={"positional": {"kind": "rotary", "mlp_width": 8}}))
