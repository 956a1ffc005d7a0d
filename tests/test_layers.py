"""Every registered layer kind, in the PyTorch backend: runs forward and backward, ignores
padding, respects causality, and sees exactly the positions its definition says."""

from __future__ import annotations

import pytest
import torch

from tfspec import load_spec
from tfspec.backends.torch import build_module
from tfspec.layers import SUBLAYERS

# Examples of each kind as written in a block; every registered kind must appear here.
EXAMPLES = {
    "self_attention": ["self_attention"],
    "causal_self_attention": ["causal_self_attention"],
    "cross_attention": ["cross_attention"],
    "restricted_self_attention": [{"kind": "restricted_self_attention", "r": 2},
                                  {"kind": "restricted_self_attention", "r": 2, "causal": True}],
    "local_1d_self_attention": [{"kind": "local_1d_self_attention", "block": 2, "memory": 2},
                                {"kind": "local_1d_self_attention", "block": 3, "memory": 3, "causal": True}],
    "local_2d_self_attention": [{"kind": "local_2d_self_attention", "block": [1, 2], "memory": [1, 1], "width": 4},
                                {"kind": "local_2d_self_attention", "block": [2, 2], "memory": [1, 1], "width": 4,
                                 "causal": True}],
    "ffn": ["ffn", {"kind": "ffn", "d_ff": 24, "activation": "gelu"}],
    "latent_attention": [{"kind": "latent_attention", "kv_lora_rank": 8, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4,
                          "v_head_dim": 6, "positions": "rotary"},
                         {"kind": "latent_attention", "q_lora_rank": 12, "kv_lora_rank": 8, "qk_nope_head_dim": 6,
                          "qk_rope_head_dim": 2, "v_head_dim": 4, "positions": {"kind": "rotary", "base": 500}}],
    "moe": [{"kind": "moe", "experts": 3, "top_k": 2, "normalize": False},
            {"kind": "moe", "experts": 2, "top_k": 2, "shared": 1, "shared_gate": True, "gated": True}],
    "recurrent": [{"kind": "recurrent", "cell": c, "bidirectional": b} for c in ("lstm", "gru", "rnn")
                  for b in (False, True)],
    "mamba2": [{"kind": "mamba2", "heads": 4, "head_dim": 4, "state": 8, "groups": 2},
               {"kind": "mamba2", "heads": 2, "head_dim": 8, "state": 4, "kernel": 3, "conv_bias": False, "bias": True,
                "dt_min": 0.01}],
    "gated_deltanet": [{"kind": "gated_deltanet", "heads": 4, "key_heads": 2, "d_k": 4, "d_v": 6},
                       {"kind": "gated_deltanet", "heads": 2, "key_heads": 2, "d_k": 8, "d_v": 4, "kernel": 3}],
    "conv": [{"kind": "conv", "kernel": 3}, {"kind": "conv", "kernel": 3, "dilation": 2, "causal": True},
             {"kind": "conv", "kernel": 4, "separable": True}],
}
CASES = [(kind, ex) for kind, examples in EXAMPLES.items() for ex in examples]


def test_every_kind_has_examples():
    assert set(EXAMPLES) == set(SUBLAYERS)


def model_for(layer, tmp_path, positional="none"):
    """A 2-layer model whose blocks are [layer, ffn]; in a decoder when the layer fits one."""
    kind = layer if isinstance(layer, str) else layer["kind"]
    decoder_ok = not SUBLAYERS[kind].model_validate(layer if isinstance(layer, dict) else {"kind": kind}).looks_ahead
    block = [layer, "ffn"]
    if kind == "cross_attention":
        stacks = {"family": "encoder-decoder", "encoder": {"layers": 1, "block": ["self_attention", "ffn"]},
                  "decoder": {"layers": 2, "block": ["causal_self_attention", layer, "ffn"]},
                  "tie_embeddings": "all"}
    elif decoder_ok:
        stacks = {"family": "decoder-only", "decoder": {"layers": 2, "block": block}}
    else:
        stacks = {"family": "encoder-only", "encoder": {"layers": 2, "block": block}}
    spec = {"vocab": 50, "d_model": 16, "heads": 2, "d_ff": 32, "dropout": 0.0, "positional": positional, **stacks}
    path = tmp_path / "spec.yaml"
    import yaml
    path.write_text(yaml.safe_dump(spec))
    torch.manual_seed(0)
    return build_module(load_spec(path)).double().eval(), load_spec(path)


def call(model, tokens, src=None):
    ports = model.graph.ports
    return model(src, tokens) if "src" in ports and "tgt" in ports else model(tokens)


@pytest.mark.parametrize("kind,layer", CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CASES)])
def test_forward_backward_reaches_every_parameter(kind, layer, tmp_path):
    model, _ = model_for(layer, tmp_path)
    model.train()
    tokens = torch.randint(4, 50, (3, 10))
    tokens[1, 6:] = 0
    src = torch.randint(4, 50, (3, 7))
    call(model, tokens, src).pow(2).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("kind,layer", CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CASES)])
def test_padding_changes_nothing_at_real_positions(kind, layer, tmp_path):
    model, _ = model_for(layer, tmp_path)
    tokens, src = torch.randint(4, 50, (1, 8)), torch.randint(4, 50, (1, 6))
    alone = call(model, tokens, src)
    padded = call(model, torch.cat([tokens, torch.zeros(1, 5, dtype=torch.long)], 1),
                  torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], 1))
    torch.testing.assert_close(padded[:, :8], alone, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind,layer", CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CASES)])
def test_receptive_field_matches_the_definition(kind, layer, tmp_path):
    """Perturb one input position; exactly the outputs whose receptive field holds it change."""
    model, spec = model_for(layer, tmp_path)
    stack = spec.decoder or spec.encoder
    sub = stack.block[0] if kind != "cross_attention" else stack.block[1]
    n, j = 12, 6
    tokens, src = torch.randint(4, 50, (1, n)), torch.randint(4, 50, (1, 5))
    changed = tokens.clone()
    changed[0, j] = 4 if tokens[0, j] != 4 else 5
    moved = (call(model, tokens, src) - call(model, changed, src)).abs().amax(-1)[0] > 1e-12
    if kind == "cross_attention":  # the decoder's causal self-attention sets the reach
        expected = torch.arange(n) >= j
    else:
        expected = torch.tensor([_reaches(sub, j, i, layers=2, n=n) for i in range(n)])
    assert moved.tolist() == expected.tolist()


def _reaches(sub, j: int, i: int, layers: int, n: int) -> bool:
    """Whether input position j can influence output i through `layers` layers of `sub`."""
    kind = sub.kind
    if kind in ("ffn", "moe"):  # position-wise
        return i == j
    if kind == "self_attention" or (kind == "recurrent" and sub.bidirectional):
        return True
    if kind in ("causal_self_attention", "latent_attention", "recurrent", "mamba2",
                "gated_deltanet"):  # latent attention is causal
        return i >= j
    if kind == "restricted_self_attention":
        back = ahead = layers * sub.r
        return j - ahead <= i <= j + back if not sub.causal else j <= i <= j + back
    if kind.startswith("local_"):  # the Image Transformer's blocks, written out here
        sees = _local_1d_sees if kind == "local_1d_self_attention" else _local_2d_sees
        reach = {j}
        for _ in range(layers):
            reach = {o for o in range(n) if any(sees(sub, o, k) for k in reach)}
        return i in reach
    left, right = sub.padding()  # conv: output i reads inputs i - left .. i + right (dilated taps)
    reach = {j}
    for _ in range(layers):
        reach = {o for o in range(n) for t in range(sub.kernel) if o - left + t * sub.dilation in reach}
    return i in reach


def _local_1d_sees(sub, q: int, k: int) -> bool:
    """Query q's block starts at a multiple of block; it sees memory positions before that
    start, its block (up to q when causal) and, unless causal, memory positions after it."""
    start = q - q % sub.block
    if sub.causal:
        return start - sub.memory <= k <= q
    return start - sub.memory <= k < start + sub.block + sub.memory


def _local_2d_sees(sub, q: int, k: int) -> bool:
    """Rows of ``width`` positions; q's query block (h x w, aligned) widened by w_m columns each
    side and h_m rows above (and below unless causal); when causal, nothing after q."""
    (h, w), (h_m, w_m) = sub.block, sub.memory
    (r, c), (rk, ck) = divmod(q, sub.width), divmod(k, sub.width)
    top, left = r - r % h, c - c % w
    rows = top - h_m <= rk <= top + h - 1 + (0 if sub.causal else h_m)
    return rows and left - w_m <= ck <= left + w - 1 + w_m and (k <= q or not sub.causal)


def test_learned_positions_reject_overlong_input(tmp_path, cli):
    model, _ = model_for("self_attention", tmp_path, positional={"kind": "learned", "max_len": 8})
    with pytest.raises(Exception, match="longer than positional.max_len"):
        model(torch.randint(4, 50, (1, 9)))
