"""The ONNX lowering of the IR ``latent_attention`` op (``tfspec.layers.latent_attention``), as
``LatentAttention`` of the PyTorch backend computes it. Step graphs carry one state per layer,
``past.<node>.latent`` (batch, past_len, kv_lora_rank + qk_rope_head_dim): the normalised
latent and the rotated shared key part, from which each step decodes every head's keys and
values again; the static (CUDA-graph) step graph is not offered for it."""

from __future__ import annotations

from tfspec.ir import Node

from .attention import attend
from . import lowering
from .norms import normalize
from .positions.rotary import rotate, rotation


@lowering("latent_attention")
def latent_attention(e, node: Node, x: str) -> str:
    """(B, L, d) -> flat (B * L, d): queries, the latent, keys and values, softmax, W^O."""
    b, a, p = e.b, node.attrs, node.params
    h, nope, rope, d_v, rank = a["heads"], a["qk_nope_head_dim"], a["qk_rope_head_dim"], a["d_v"], a["kv_lora_rank"]
    if "w_q" in p:
        q = b.linear(x, p["w_q"])
    else:
        q = b.linear(normalize(b, b.linear(x, p["w_qa"]), "rms", a["latent_eps"], p["q_norm"]), p["w_qb"])
    q_nope, q_pe = b.op("Split", b.op("Reshape", q, b.batched(-1, h, nope + rope)), b.ints(nope, rope), axis=-1,
                        outputs=2)  # (B, L, h, .)
    c, k_pe = b.split(b.linear(x, p["w_kva"]), rank, rope)  # flat (B * L, .)
    c = b.op("Reshape", normalize(b, c, "rms", a["latent_eps"], p["kv_norm"]), b.batched(-1, rank))
    k_pe = b.op("Reshape", k_pe, b.batched(-1, rope))  # (B, L, rope): one head for all
    if a["positions"] is not None:
        cos, sin = rotation(e, node.shape[1], x, rope, a["positions"])
        q_pe = b.op("Reshape", rotate(b, q_pe, cos, sin, h, rope, rope), b.batched(-1, h, rope))
        k_pe = rotate(b, k_pe, cos, sin, 1, rope, rope)
    latent = b.op("Concat", c, k_pe, axis=-1)  # (B, L, rank + rope): what decoding carries
    latent = e.variant.append(e, node, "latent", latent, rank + rope)
    c, k_pe = b.op("Split", latent, b.ints(rank, rope), axis=-1, outputs=2)
    k_nope, v = b.op("Split", b.op("Reshape", b.linear(c, p["w_kvb"]), b.batched(-1, h, nope + d_v)),
                     b.ints(nope, d_v), axis=-1, outputs=2)  # (B, Lk, h, .)
    heads = b.op("Concat", b.op("Shape", k_nope, start=0, end=3), b.ints(rope), axis=0)  # (B, Lk, h, rope)
    k = b.op("Concat", k_nope, b.op("Expand", b.op("Unsqueeze", k_pe, b.ints(2)), heads), axis=-1)
    q, k, v = (b.op("Transpose", t, perm=[0, 2, 1, 3]) for t in (b.op("Concat", q_nope, q_pe, axis=-1), k, v))
    mask = e.mask(node.layer, node.shape[1], a["kv_seq"], q, k)
    y = attend(b, q, k, v, mask, node)  # (B, h, Lq, d_v)
    y = b.op("Reshape", b.op("Transpose", y, perm=[0, 2, 1, 3]), b.ints(-1, h * d_v))  # (B * Lq, h*d_v)
    b.flat.add(y)
    return b.linear(y, p["w_o"])
