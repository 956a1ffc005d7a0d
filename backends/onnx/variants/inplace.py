"""The in-place cache's step graph (``decoder_inplace``, written by ``export --fused``): its
self-attention is onnxruntime's ``GroupQueryAttention`` over key/value buffers that it extends
where they lie (``runtime/inplace.py`` binds each ``present.*`` output to its ``past.*`` buffer).

GroupQueryAttention is causal over the buffer's first ``offset + new`` positions, so only
attention that is plain (dot-product scores, no added terms) and plainly causal (no band)
qualifies; a model with any other carried state keeps the standard step graph
(``NotInPlace``). Padded keys of a batch of prompts of different lengths come in as its
``attention_bias``.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from . import register
from .decoder import Decoder

DOMAIN = "com.microsoft"


class NotInPlace(Exception):
    """The model's step cannot run over in-place buffers; the message says which layer and why."""


@register
class InPlace(Decoder):
    """Positions start at ``offset`` (1,); no ``beam_rows`` (the runtime reorders rows between
    steps). onnxruntime's CPU kernels only."""

    name, order = "decoder_inplace", 5
    offset_given = True

    @classmethod
    def written(cls, graph, asked) -> bool:
        return asked.fused and "tgt" in graph.ports

    @classmethod
    def opened_at_load(cls, provider: str) -> bool:
        return provider == "CPUExecutionProvider"  # GroupQueryAttention in float32 is a CPU kernel only

    def state(self, e, node, role: str, shape) -> str:
        """A buffer extended in place: only GroupQueryAttention's."""
        name = f"past.{node.name}.{role}"
        if shape[2] != "max_len":
            raise NotInPlace(f"{node.name} carries state GroupQueryAttention does not hold")
        return e.cached(("past", name), lambda: e.b.input(name, shape))

    def attend(self, e, node, plain: bool, q: str, k: str, v: str) -> str | None:
        return attend_in_place(e, node, plain, q, k, v) if self.carries(node) else None


def attend_in_place(e, node, plain: bool, q: str, k: str, v: str) -> str:
    """Self-attention of ``node`` over its buffers: (B, L, h*d) queries (or their flat view)
    and this step's keys and values -> (B, L, h*d_v); the buffers become the presents."""
    b, a = e.b, node.attrs
    h, g, d_k, d_v = a["heads"], a["kv_heads"], a["d_k"], a["d_v"]
    why = ("its scores are not plain dot products" if not plain else
           "it is not plainly causal" if not node.layer.plain_causal or node.layer.band() is not None else
           "its keys and values differ in width" if d_k != d_v else
           f"its heads are {d_k} wide (GroupQueryAttention's are multiples of 8)" if d_k % 8 else None)
    if why:
        raise NotInPlace(f"{node.name}: {why}")
    pasts = [e.state(node, role, ["batch", g, "max_len", d_k]) for role in ("key", "value")]
    packed = _packed(b, q, k, v)
    q, k, v = (b.sequence(packed, (h + 2 * g) * d_k), "", "") if packed else \
        (b.sequence(q, h * d_k), b.sequence(k, g * d_k), b.sequence(v, g * d_v))
    seqlens, total = e.cached("in_place_lengths", lambda: _lengths(e, q))
    padded = e.key_bias("T")  # (B, 1, 1, total): a batch of prompts of different lengths, left-padded
    if padded is not None:
        padded = e.cached("in_place_bias", lambda: b.op("Expand", padded, b.op("Concat", b.op(  # (B, 1, L, total)
            "Shape", q, start=0, end=1), b.ints(1), b.op("Shape", q, start=1, end=2), _total(e, q), axis=0)))
    y, key, value = b.op("GroupQueryAttention", q, k, v, *pasts, seqlens, total, None, None, None, padded,
                         outputs=3, domain=DOMAIN, num_heads=h, kv_num_heads=g, scale=float(a["scale"]))
    for role, t in (("key", key), ("value", value)):
        e.present(node, role, t, ["batch", g, "max_len", d_k])
    b.shapes.append(helper.make_tensor_value_info(y, b.elem_type, ["batch", "new_len", h * d_v]))
    return y


def _packed(b, q: str, k: str, v: str) -> str | None:
    """The flat (B * L, (h + 2g) * d) projection that ``q``, ``k`` and ``v`` were split from in
    that order, which GroupQueryAttention reads whole (its packed QKV: the Split and three
    Reshapes a layer fewer), or None (keys or values changed after the split: normed, rotated)."""
    split = next((n for n in reversed(b.nodes) if n.op_type == "Split" and list(n.output) == [q, k, v]), None)
    return split.input[0] if split is not None and split.input[0] in b.flat else None


def _lengths(e, q: str) -> tuple[str, str]:
    """GroupQueryAttention's int32 lengths for (B, L, .) queries: every row's last position
    (B,) and the positions filled after this step, offset + L (a scalar)."""
    b, total = e.b, _total(e, q)
    last = b.op("Expand", b.op("Sub", total, b.const(np.int64(1))), b.op("Shape", q, start=0, end=1))
    as_int32 = lambda t: b.op("Cast", t, to=TensorProto.INT32)  # noqa: E731
    return as_int32(last), as_int32(b.op("Squeeze", total, b.ints(0)))


def _total(e, q: str) -> str:
    """int64 (1,): positions filled after this step of (B, L, .) queries, offset + L."""
    return e.cached("in_place_total", lambda: e.b.op("Add", e.offset(), e.b.shape_of(q, 1)))
