"""Rotary positions (Su et al. 2021) in ONNX graphs, as the PyTorch backend's ``Rotary``:
queries and keys turned by their positions as they leave the projection; the fused and
blocked attention paths still apply."""

from __future__ import annotations

import json

import numpy as np
from onnx import TensorProto

from tfspec.ir.positions import rotary_frequencies
from tfspec.ir.rope_scaling import attention_factor, length_dependent, long_attention_factor, ntk_exponents
from tfspec.positions.rotary import decay_bases, decay_centre

from . import PositionStage, position_stage


@position_stage("rotary")
class Rotary(PositionStage):
    def turn(self, e, q: str, k: str) -> tuple[str, str]:
        """(B, L, h*d) queries and (B, L, g*d) keys, each head's first r features rotated."""
        a = self.node.attrs
        d, positions = a["d_k"], a["positions"]
        cos, sin = rotation(e, self.node.shape[1], q, d, positions)
        rotated = int(d * positions["fraction"])
        k_cos, k_sin = cos, sin
        if positions.get("decay_length") is not None:  # xPos: queries times zeta^(n / length), keys over it
            cos, sin, k_cos, k_sin = decayed(e, self.node.shape[1], q, d, positions, cos, sin)
        return (rotate(e.b, q, cos, sin, a["heads"], d, rotated),
                rotate(e.b, k, k_cos, k_sin, a["kv_heads"], d, rotated))


def decayed(e, seq: str, x: str, d: int, positions: dict, cos: str, sin: str) -> tuple[str, str, str, str]:
    """xPos (Sun et al. 2022, §3.2), as the PyTorch backend's ``Decay``: ``rotation``'s cos and
    sin times zeta_i^((n - c) / decay_length) per rotated pair i for the queries, over it for the
    keys, the exponent in float64; shared by the layers alike."""
    def build():
        b, at = e.b, e.positions(seq, x)
        rate = np.log(decay_bases(int(d * positions["fraction"]))) / positions["decay_length"]
        shifted = b.op("Sub", b.op("Cast", at, to=TensorProto.DOUBLE),
                       b.const(float(decay_centre(positions["max_len"])), np.float64))
        power = b.op("Mul", b.op("Unsqueeze", shifted, b.ints(-1)), b.const(rate.reshape(1, -1), np.float64))
        scale = b.op("Unsqueeze", b.op("Exp", power), b.ints(-2))  # (L, 1, r/2) or (B, L, 1, r/2)
        inverse = b.op("Reciprocal", scale)
        return tuple(b.op("Cast", b.op("Mul", b.op("Cast", t, to=TensorProto.DOUBLE), f), to=b.elem_type)
                     for f in (scale, inverse) for t in (cos, sin))
    return e.cached(("decay", seq, d, json.dumps(positions, sort_keys=True)), build)


def rotation(e, seq: str, x: str, d: int, positions: dict) -> tuple[str, str]:
    """cos and sin (L, 1, r/2) of the positions of ``x``'s L vectors for heads of d features,
    as ``Rotation`` of the PyTorch backend, times the scaling's ``attention_factor``; (B, L, 1,
    r/2) where the graph is fed positions per row (genai's ``position_ids``). The angles are
    float64, as PyTorch's: a float32 position x frequency is off by up to 2^-7 rad at position
    131,072 (cos by 2e-3). Layers alike share one table per graph."""
    key = ("rotary", seq, d, json.dumps(positions, sort_keys=True))
    return e.cached(key, lambda: _rotation(e, seq, x, d, positions))


def _rotation(e, seq: str, x: str, d: int, positions: dict) -> tuple[str, str]:
    b, at = e.b, e.positions(seq, x)
    angles = b.op("Mul", b.op("Unsqueeze", b.op("Cast", at, to=TensorProto.DOUBLE), b.ints(-1)),
                  _frequencies(b, at, d, positions))
    angles = b.op("Unsqueeze", angles, b.ints(-2))
    multiplier = _multiplier(b, at, positions)
    scaled = (lambda t: t) if multiplier is None else (lambda t: b.op("Mul", t, multiplier))
    return tuple(b.op("Cast", scaled(b.op(f, angles)), to=b.elem_type) for f in ("Cos", "Sin"))


def _multiplier(b, at: str, positions: dict) -> str | None:
    """The attention factor cos and sin are multiplied by (None where it is 1): a constant, or
    PhiMoE's long_mscale in calls past the original length and its short_mscale within."""
    factor, long = attention_factor(positions), long_attention_factor(positions)
    if long is None:
        return None if factor == 1 else b.const(factor, np.float64)
    past = b.op("Greater", _reach(b, at), b.const(np.int64(positions["scaling"]["original_max_position_embeddings"])))
    return b.op("Where", past, b.const(long, np.float64), b.const(factor, np.float64))


def _reach(b, at: str) -> str:
    """The length a call reaches: its largest position ``at`` + 1 (a decoding step's total length)."""
    return b.op("Add", b.op("ReduceMax", b.op("Reshape", at, b.ints(-1)), keepdims=0), b.const(np.int64(1)))


def _frequencies(b, at: str, d: int, positions: dict) -> str:
    """float64 (1, r/2) ``rotary_frequencies``: constant, or for dynamic and longrope scaling
    those of the length the graph's call reaches, its largest position ``at`` + 1 (a decoding
    step's total length), as transformers' ``dynamic_rope_update`` picks them per call."""
    fixed = rotary_frequencies(d, positions).reshape(1, -1)
    if not length_dependent(positions):
        return b.const(fixed, np.float64)
    scaling = positions["scaling"]
    original = scaling["original_max_position_embeddings"]
    reach = _reach(b, at)
    if scaling["type"] == "longrope":
        long = rotary_frequencies(d, positions, original + 1).reshape(1, -1)
        return b.op("Where", b.op("Greater", reach, b.const(np.int64(original))), b.const(long, np.float64),
                    b.const(fixed, np.float64))
    # dynamic NTK: each frequency times g^-(2i / (r - 2)), g = factor max(n, L) / L - (factor - 1) (ntk_growth)
    n = b.op("Cast", b.op("Max", reach, b.const(np.int64(original))), to=TensorProto.DOUBLE)
    growth = b.op("Sub", b.op("Mul", n, b.const(scaling["factor"] / original, np.float64)),
                  b.const(scaling["factor"] - 1, np.float64))
    return b.op("Mul", b.const(fixed, np.float64),
                b.op("Pow", growth, b.const(-ntk_exponents(fixed.shape[1]).reshape(1, -1), np.float64)))


def rotate(b, x: str, cos: str, sin: str, heads: int, d: int, rotated: int) -> str:
    """(B, L, heads*d) queries or keys (or their flat view) with each pair (x_i, x_{i+r/2}) of
    the first r = ``rotated`` features of every head rotated; the rest pass unchanged."""
    half = rotated // 2
    sizes = [half, half] + ([d - rotated] if d > rotated else [])
    x1, x2, *rest = b.op("Split", b.op("Reshape", x, b.batched(-1, heads, d)), b.ints(*sizes), axis=-1,
                         outputs=len(sizes))
    rotated = b.op("Concat", b.op("Sub", b.op("Mul", x1, cos), b.op("Mul", x2, sin)),
                   b.op("Add", b.op("Mul", x1, sin), b.op("Mul", x2, cos)), *rest, axis=-1)
    return b.op("Reshape", rotated, b.ints(0, 0, heads * d))
