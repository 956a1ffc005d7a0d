"""The ONNX lowering of the IR ``gated_deltanet`` op (``tfspec.layers.gated_deltanet``), computing
what ``backends/torch/gated_deltanet.py`` computes: the gated delta rule as an ONNX ``Scan`` over
the call's positions, one state update per position (decay, the state's prediction for the key,
the rank-one correction, the query's read), in float32. Correctness first: a prompt of L positions
runs the body L times one after another (about a dozen small kernels each), where the PyTorch
backend solves 64 positions at once; ONNX has no triangular solve to do the same. A step graph
takes and returns the convolution's last k - 1 inputs (``past.<node>.window``) and the state
(``past.<node>.state``, (batch, heads, d_k, d_v)): a decoding step of one position is one pass
of the body."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tfspec.ir import Node

from . import lowering
from .ffn import activation
from .norms import normalize

L2_EPS = 1e-6
"""The queries' and keys' L2-norm epsilon (the PyTorch backend's ``L2_EPS``)."""


@lowering("gated_deltanet")
def gated_deltanet(e, node: Node, x: str) -> str:
    b, a, p = e.b, node.attrs, node.params
    H, G, dk, dv, k = a["heads"], a["key_heads"], a["d_k"], a["d_v"], a["kernel"]
    r, d = H // G, b.weights[p["w_out"]].shape[0]
    x, pad = b.sequence(x, d), e.padding(node.shape[1])
    if pad is not None:  # padding reaches no real position
        x = b.op("Where", b.op("Unsqueeze", pad, b.ints(-1)), b.const(0.0), x)
    grouped = b.op("Reshape", b.linear(x, p["w_qkvz"]), b.ints(0, 0, G, 2 * dk + 2 * r * dv))
    q, key, v, z = b.op("Split", grouped, b.ints(dk, dk, r * dv, r * dv), axis=-1, outputs=4)
    beta, rate = b.op("Split", b.op("Reshape", b.linear(x, p["w_ba"]), b.ints(0, 0, G, 2 * r)), b.ints(r, r),
                      axis=-1, outputs=2)
    flat = (lambda t, width: b.op("Reshape", t, b.ints(0, 0, width)))  # noqa: E731
    mixed = b.op("Concat", flat(q, G * dk), flat(key, G * dk), flat(v, H * dv), axis=-1)
    conv, S0 = _convolved(e, node, mixed, 2 * G * dk + H * dv, k, pad)
    q, key, v = b.op("Split", conv, b.ints(G * dk, G * dk, H * dv), axis=-1, outputs=3)
    q, key = (_per_value_head(b, _l2norm(b, b.op("Reshape", t, b.ints(0, 0, G, dk))), r, H, dk) for t in (q, key))
    q = b.op("Mul", q, b.const(np.float32(dk ** -0.5), np.float32))
    beta = b.op("Sigmoid", _f32(b, flat(beta, H)))
    decay = b.const(-np.exp(b.weights[p["A_log"]].astype(np.float32)), np.float32)  # -exp(A_log) per head
    dt_bias = b.const(b.weights[p["dt_bias"]], np.float32)
    decay = b.op("Exp", b.op("Mul", decay, b.op("Softplus", b.op("Add", _f32(b, flat(rate, H)), dt_bias))))
    if S0 is None:
        S0 = b.op("ConstantOfShape", b.batched(H, dk, dv), value=helper.make_tensor("zero", TensorProto.FLOAT, [1],
                                                                                     [0.0]))
    S, o = _scan(b, node.name, S0, q, key, b.op("Reshape", v, b.ints(0, 0, H, dv)), decay, beta, (H, dk, dv))
    if e.carries(node):
        e.present(node, "state", _typed(b, S), ["batch", H, dk, dv])
    normed = b.op("Mul", normalize(b, _typed(b, o), "rms", a["norm_eps"], p["norm"], size=dv),
                  activation(b, b.op("Reshape", z, b.ints(0, 0, H, dv)), "silu"))
    return b.linear(b.op("Reshape", normed, b.ints(0, 0, H * dv)), p["w_out"])


def _convolved(e, node: Node, mixed: str, width: int, k: int, pad: str | None) -> tuple[str, str | None]:
    """Queries, keys and values through the causal depthwise convolution and SiLU, in float32,
    and the carried state (None outside step graphs); a step graph prepends the last k - 1 inputs."""
    b, a = e.b, node.attrs
    pads, S0 = [k - 1, 0], None
    if e.carries(node):
        S0, pads = _f32(b, e.state(node, "state", ["batch", a["heads"], a["d_k"], a["d_v"]])), [0, 0]
    if e.carries(node) and k > 1:  # a kernel of 1 reads no earlier input
        mixed = b.op("Concat", e.state(node, "window", ["batch", k - 1, width]), mixed, axis=1)
        e.present(node, "window", b.op("Slice", mixed, b.ints(-(k - 1)), b.ints(np.iinfo(np.int64).max), b.ints(1)),
                  ["batch", k - 1, width])
    conv = b.op("Conv", b.op("Transpose", mixed, perm=[0, 2, 1]), b.param(node.params["w_conv"]), group=width,
                pads=pads)
    conv = activation(b, _f32(b, b.op("Transpose", conv, perm=[0, 2, 1])), "silu")
    if pad is not None:
        conv = b.op("Where", b.op("Unsqueeze", pad, b.ints(-1)), b.const(np.float32(0), np.float32), conv)
    return conv, S0


def _l2norm(b, x: str) -> str:
    """x / sqrt(|x|^2 + eps) over the last axis."""
    square = b.op("ReduceSum", b.op("Mul", x, x), b.ints(-1), keepdims=1)
    return b.op("Div", x, b.op("Sqrt", b.op("Add", square, b.const(np.float32(L2_EPS), np.float32))))


def _per_value_head(b, x: str, r: int, H: int, width: int) -> str:
    """(B, L, G, width) -> (B, L, H, width): each key head repeated for its r value heads."""
    if r == 1:
        return x
    return b.op("Reshape", b.op("Expand", b.op("Unsqueeze", x, b.ints(3)), b.ints(1, 1, 1, r, 1)),
                b.ints(0, 0, H, width))


def _scan(b, name: str, S0: str, q: str, k: str, v: str, decay: str, beta: str, sizes) -> tuple[str, str]:
    """The gated delta rule over axis 1 of q, k (B, L, H, d_k), v (B, L, H, d_v), decay = exp(g) and
    beta (B, L, H), from S0 (B, H, d_k, d_v): -> the final state and the outputs (B, L, H, d_v)."""
    H, dk, dv = sizes
    names = {part: f"{name}/scan.{part}" for part in ("S", "q", "k", "v", "decay", "beta")}
    outer, b.nodes = b.nodes, []
    n = names
    S = b.op("Mul", n["S"], b.op("Unsqueeze", n["decay"], b.ints(2, 3)))  # decayed
    predicted = b.op("MatMul", b.op("Unsqueeze", n["k"], b.ints(2)), S)  # (B, H, 1, d_v): S^T k
    delta = b.op("Mul", b.op("Sub", b.op("Unsqueeze", n["v"], b.ints(2)), predicted),
                 b.op("Unsqueeze", n["beta"], b.ints(2, 3)))
    S = b.op("Add", S, b.op("MatMul", b.op("Unsqueeze", n["k"], b.ints(3)), delta))  # + k delta^T
    o = b.op("Squeeze", b.op("MatMul", b.op("Unsqueeze", n["q"], b.ints(2)), S), b.ints(2))  # S^T q
    info = (lambda key, *shape: helper.make_tensor_value_info(key, TensorProto.FLOAT, ["batch", *shape]))  # noqa: E731
    body = helper.make_graph(b.nodes, f"{name}/scan",
                             [info(n["S"], H, dk, dv), info(n["q"], H, dk), info(n["k"], H, dk), info(n["v"], H, dv),
                              info(n["decay"], H), info(n["beta"], H)],
                             [info(S, H, dk, dv), info(o, H, dv)])
    b.nodes = outer
    final, outputs = f"{name}/scan.final", f"{name}/scan.outputs"
    b.nodes.append(helper.make_node("Scan", [S0, q, k, v, decay, beta], [final, outputs], name=f"{name}/scan",
                                    body=body, num_scan_inputs=5, scan_input_axes=[1] * 5, scan_output_axes=[1]))
    return final, outputs


def _f32(b, x: str) -> str:
    return x if b.elem_type == TensorProto.FLOAT else b.op("Cast", x, to=TensorProto.FLOAT)


def _typed(b, x: str) -> str:
    return x if b.elem_type == TensorProto.FLOAT else b.op("Cast", x, to=b.elem_type)
