"""``report --train`` op by op against what autograd really keeps: each op's declared saved
tensors (``tfspec/ir/ops``) equal, in bytes, the distinct tensors the PyTorch backend's forward
pass hands to autograd while that op runs (``saved_tensors_hooks``), for rotary grouped-query
attention, a sliding window long enough to run block by block, latent attention, an
encoder-decoder with cross-attention, and a mixture of experts (within 1%: which rows each
expert gets is the router's draw)."""

from __future__ import annotations

import pytest
import torch

from tfspec import build_graph
from tfspec.analysis import train_memory
from tfspec.backends.torch import build_module
from tfspec.spec import Spec

ROWS, LENGTH = 2, 128
ATTENTION = {
    "rotary-gqa": "causal_self_attention",
    "sliding": {"kind": "restricted_self_attention", "r": 31, "causal": True},  # 128 > 3 blocks of 32
    "latent": {"kind": "latent_attention", "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
               "v_head_dim": 12},
    "latent-q": {"kind": "latent_attention", "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
                 "qk_rope_head_dim": 4, "v_head_dim": 12},
}


def spec_of(case: str) -> Spec:
    common = {"name": case, "vocab": 64, "d_model": 32, "heads": 4, "d_ff": 64, "dropout": 0.0, "norm": "pre",
              "norm_type": "rms", "activation": "silu", "gated": True}
    if case == "encoder-decoder":
        return Spec.model_validate(common | {"positional": {"kind": "sinusoidal", "max_len": 256},
                                             "encoder": {"layers": 1, "block": ["self_attention", "ffn"]},
                                             "decoder": {"layers": 1, "block": ["causal_self_attention",
                                                                                "cross_attention", "ffn"]}})
    grouped = {"kv_heads": 2} if not case.startswith("latent") else {}
    ffn = {"kind": "moe", "experts": 4, "top_k": 2, "d_ff": 48} if case == "moe" else "ffn"
    return Spec.model_validate(common | grouped | {
        "family": "decoder-only", "positional": {"kind": "rotary", "max_len": 256},
        "decoder": {"layers": 2, "block": [ATTENTION.get(case, "causal_self_attention"), ffn]}})


def measured(model, graph) -> dict[str, int]:
    """Bytes of the distinct non-parameter tensors autograd keeps, by the op running when kept."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    running, kept = [""], {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params and storage.data_ptr() not in kept:
            kept[storage.data_ptr()] = (running[0], storage.nbytes())
        return t

    for module in model.modules():
        if hasattr(module, "node_name"):
            module.register_forward_pre_hook(lambda m, args: running.__setitem__(0, m.node_name))
    ports = sum(port in graph.ports for port in ("src", "tgt"))
    tokens = torch.randint(graph.spec.vocab.pad_id + 1, graph.spec.vocab.size, (ports, ROWS, LENGTH))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(*tokens)  # no padding: masks only where the kind has one
    by_op: dict[str, int] = {}
    for op, size in kept.values():
        by_op[op] = by_op.get(op, 0) + size
    return by_op


@pytest.mark.parametrize("case", [*ATTENTION, "encoder-decoder", "moe"])
def test_each_ops_saved_tensors_are_what_autograd_keeps(case):
    graph = build_graph(spec_of(case))
    got = measured(build_module(graph).train(), graph)
    sizes = {"B": ROWS, "S": LENGTH, "T": LENGTH}
    shared, embeddings = {}, 0  # tables one call computes and every layer reads (rotary's): kept by the first
    for node in graph.nodes():
        if node.op not in ("attention", "latent_attention", "ffn", "moe", "rms_norm", "embedding", "projection"):
            continue
        saved = train_memory._saved(graph, node, sizes)
        own = sum(v for k, v in saved.items() if not k.startswith("positions#"))
        tables = {k: v for k, v in saved.items() if k.startswith("positions#") and k not in shared}
        shared |= tables
        if node.op == "embedding":  # a tied table is one module, whichever stack's ids it reads
            embeddings += own
            continue
        assert own + sum(tables.values()) == pytest.approx(got.get(node.name, 0), rel=0.01 if node.op == "moe" else 0), \
            node.name
    assert embeddings == sum(got.get(node.name, 0) for node in graph.nodes() if node.op == "embedding")
