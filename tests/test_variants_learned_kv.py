"""Learned keys and values (``learned_kv``; persistent memory, Sukhbaatar et al. 2019, §4;
x-transformers' ``attn_num_mem_kv``, issue 57): m learned key/value pairs per key/value head
placed before the sequence's keys, which every query sees through any mask.

References: x-transformers 2.31.10 on the same weights (``tests/xtransformers_reference.py``) in
PyTorch, KV-cached decoding and onnxruntime (logits within 1e-4); its parameter counts; the
scores counted as n x (n + m) (causal: n(n+1)/2 + n m); the training-memory estimate against
autograd's saved (B, h, L, m + L) tensors; the decoding cache holding the sequence's keys only.
"""

from __future__ import annotations

import pytest
import sympy
import torch
from pydantic import ValidationError

from tfspec import build_graph
from tfspec.analysis import train_memory
from tfspec.analysis.complexity import table1_complexity
from tfspec.analysis.flops import SYMBOLS, op_flops
from tfspec.analysis.params import analyze_params
from tfspec.backends.onnx import export
from tfspec.backends.torch import build_module
from tfspec.backends.torch.model import DecodeState
from tfspec.ir.ops import OPS
from tfspec.spec import Spec
from tests.xtransformers_reference import (HEADS, Case, attention_hook, check_cached, check_onnx, check_torch,
                                           differs, pair, spec, tokens)

MEMORY = 3


def copy_memory(a, copier, prefix):
    """x-transformers holds the learned keys and values as (kv_heads, m, dim_head) ``mem_k``/``mem_v``."""
    copier.set(f"{prefix}.mem_k", a.mem_k)
    copier.set(f"{prefix}.mem_v", a.mem_v)


def case(family: str = "decoder-only", kv_heads: int | None = None) -> Case:
    options, grouped = {"attn_num_mem_kv": MEMORY}, {}
    if kv_heads is not None:
        options["attn_kv_heads"], grouped = kv_heads, {"kv_heads": kv_heads}
    return Case(options=options, attention={"learned_kv": MEMORY}, family=family, spec=grouped,
                hooks=(attention_hook(copy_memory),))


@pytest.mark.parametrize("kv_heads", [None, 1])
def test_matches_x_transformers_in_pytorch_and_cached_decoding(kv_heads):
    check_torch(case(kv_heads=kv_heads))
    check_torch(case("encoder-only", kv_heads))
    check_cached(case(kv_heads=kv_heads))


def test_matches_x_transformers_in_onnx(tmp_path):
    """The export's parity checks (full sequences, steps after pasts, greedy decoding) pass, and
    onnxruntime's logits are x-transformers'."""
    check_onnx(case(kv_heads=1), tmp_path / "decoder")
    check_onnx(case("encoder-only"), tmp_path / "encoder")


def test_padded_queries_still_see_the_learned_keys():
    """A left-padded row's logits are its unpadded logits: padding hides the padded keys only."""
    _, tf = pair(case())
    ids = tokens(1, 7)
    padded = torch.cat([torch.zeros(1, 2, dtype=ids.dtype), ids], 1)  # 0 is the pad id
    with torch.no_grad():
        alone = tf(ids)[0]
        batched = tf(torch.cat([padded, tokens(1, 9, seed=2)]))[0, 2:]
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=0)


def test_is_not_a_no_op():
    differs(case())


def test_counts_x_transformers_parameters_and_scores_n_by_n_plus_m():
    """2 g m d_head parameters a layer, as x-transformers counts them; every query scores the m
    learned keys beside its visible ones: n(n+1)/2 + n m pairs causal, n (n + m) unmasked; Table 1's
    complexity stays O(n^2 d)."""
    xt, _ = pair(case())
    graph = build_graph(spec(case()))
    assert analyze_params(graph).total == sum(p.numel() for p in xt.parameters())
    n, h, d_k, d_v = SYMBOLS.n, SYMBOLS.h, SYMBOLS.d_k, SYMBOLS.d_v
    for family, pairs in (("decoder-only", n * (n + 1) / 2 + n * MEMORY), ("encoder-only", n * (n + MEMORY))):
        node = next(x for x in build_graph(spec(case(family))).nodes() if x.op == "attention")
        terms = op_flops(node, dense=False)
        assert sympy.expand(terms["scores"] - 2 * pairs * h * d_k) == 0
        assert sympy.expand(terms["values"] - 2 * pairs * h * d_v) == 0
        assert table1_complexity(node.layer) == "O(n²·d)"


def test_decoding_caches_only_the_sequence():
    """The learned keys are constants: the per-position cache is the baseline's, and after t steps
    the decoder's cache holds t keys per layer, not m + t."""
    def cached(c):
        node = next(x for x in build_graph(spec(c)).nodes() if x.op == "attention")
        return OPS[node.op].cached(node)

    assert cached(case()) == cached(Case())
    _, tf = pair(case())
    state, ids = DecodeState(), tokens(2, 5)
    with torch.no_grad():
        for t in range(ids.shape[1]):
            tf.run({"tgt": ids[:, t:t + 1]}, state=state)
    assert {k.shape[2] for k, _ in state.cache.values()} == {ids.shape[1]}


def test_training_memory_estimate_keeps_what_autograd_keeps():
    """The weights the backward keeps are (B, h, L, m + L), and so are the repeated keys' rows."""
    rows, length = 2, 12
    s = spec(case())
    graph = build_graph(s)
    module, kept = build_module(graph), {}

    def pack(t):
        if t.numel() == rows * HEADS * length * (length + MEMORY):  # a (B, h, L, m + L) tensor
            kept[t.untyped_storage().data_ptr()] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(torch.randint(4, 50, (rows, length)))
    sizes = {"B": rows, "S": length, "T": length}
    held = sum(v for node in graph.nodes() for k, v in train_memory._saved(graph, node, sizes).items()
               if k.endswith("#weights"))
    assert held == sum(kept.values())


def test_refusals_name_the_field():
    with pytest.raises(ValidationError, match="learned_kv"):
        spec(Case(attention={"learned_kv": 0}))
    with pytest.raises(ValidationError, match="learned_kv .* alibi positions add terms"):
        Spec.model_validate(spec(case()).model_dump(exclude_unset=True) | {
            "positional": {"kind": "alibi", "max_len": 16}})
    latent = {"kind": "latent_attention", "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
              "v_head_dim": 8, "learned_kv": 2}
    with pytest.raises(ValidationError, match="does not apply learned_kv"):
        spec(Case(spec={"decoder": {"layers": 1, "block": [latent, "ffn"]}}))
    with pytest.raises(ValidationError, match="learned_kv .* encoder's keys"):
        spec(Case(family="decoder-only", spec={"family": "encoder-decoder", "encoder": {"layers": 1, "block": [
            "self_attention", "ffn"]}, "decoder": {"layers": 1, "block": [
                "causal_self_attention", {"kind": "cross_attention", "learned_kv": 2}, "ffn"]}}))


def test_a_band_keeps_the_learned_keys_in_view(tmp_path):
    """A causal window reaching every position computes what causal attention does, learned keys
    included; a narrower one exports with parity (steps after pasts drop keys older than the band,
    never the learned ones)."""
    def model(layer):
        s = spec(Case(spec={"decoder": {"layers": 2, "block": [layer | {"learned_kv": MEMORY}, "ffn"]}}))
        torch.manual_seed(0)
        return build_module(s).eval()

    causal, window = model({"kind": "causal_self_attention"}), model({"kind": "restricted_self_attention",
                                                                       "r": 15, "causal": True})
    window.load_state_dict(causal.state_dict())
    ids = tokens()
    with torch.no_grad():
        torch.testing.assert_close(window(ids), causal(ids), atol=1e-5, rtol=0)
    result = export(model({"kind": "restricted_self_attention", "r": 3, "causal": True}), tmp_path)
    assert result.ok, [str(c) for c in result.checks if not c.ok]
