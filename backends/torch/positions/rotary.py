"""Rotary positions (Su et al. 2021; Llama, GPT-NeoX, Qwen, Gemma, ...) in PyTorch: queries and
keys turned by their positions as they leave the projection, so q·k depends on distance only.
Fused kernels still apply: the stage adds nothing to the scores."""

from __future__ import annotations

import numpy as np
import torch

from tfspec.ir.positions import rotary_frequencies
from tfspec.ir.rope_scaling import attention_factor, length_dependent
from tfspec.positions.rotary import decay_bases, decay_centre

from . import PositionStage, position_stage


@position_stage("rotary")
class Rotary(PositionStage):
    def __init__(self, node):
        positions = node.attrs["positions"]
        self.seq, self.rotation = node.shape[1], Rotation(node.attrs["d_k"], positions)
        self.decay = None if positions.get("decay_length") is None else Decay(node.attrs["d_k"], positions)

    def turn(self, ctx, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, L, h, d) queries and (B, L, g, d) keys, each rotated by its position (and with
        ``decay_length``, xPos: queries' pairs times zeta^(n / length), keys' over it)."""
        cos, sin = self.rotation(ctx, self.seq, q.shape[1], q)  # one rotation table per call, for every layer
        if self.decay is None:
            return rotate(q, cos, sin), rotate(k, cos, sin)
        q_cos, q_sin, k_cos, k_sin = self.decay(ctx, self.seq, q.shape[1], cos, sin)
        return rotate(q, q_cos, q_sin), rotate(k, k_cos, k_sin)


class Decay:
    """xPos (Sun et al. 2022, §3.2) on one layer's rotation in a call: its cos and sin, (L, 1,
    r/2) or (B, L, 1, r/2) at each row's positions, times the queries' scale zeta_i^((n - c) /
    decay_length) per rotated pair i, and over it for the keys; c the fixed ``decay_centre``
    (it cancels in q_n k_m). The scale is computed in float64, as the angles; layers alike share
    the four tables per call."""

    def __init__(self, d: int, positions: dict):
        rotated = int(d * positions["fraction"])
        self.rate = torch.from_numpy(np.log(decay_bases(rotated)) / positions["decay_length"])
        self.centre = decay_centre(positions["max_len"])

    def __call__(self, ctx, seq: str, length: int, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        offset, rows = ctx.start(seq), ctx.positions.get(seq)

        def build():
            if rows is not None:
                at = rows.to(cos.device, torch.float64)
            else:
                at = torch.arange(offset, offset + length, dtype=torch.float64, device=cos.device)
            scale = torch.exp((at[..., None] - self.centre) * self.rate.to(cos.device))[..., None, :]
            return tuple((t * f).to(cos.dtype) for f in (scale, 1 / scale) for t in (cos.double(), sin.double()))
        # cos is this call's own table (cached by ``Rotation``), so its id tells the rotations apart
        return ctx.cached(("decay", id(cos), self.rate.numpy().tobytes(), self.centre), build)


class Rotation:
    """The cos and sin one layer's rotary positions turn queries and keys by in a call: of
    fixed frequencies, or (dynamic and longrope scaling) of those for the length the call
    reaches, its last position + 1, as transformers' ``dynamic_rope_update`` reads it; times
    the scaling's attention factor (YaRN, LongRoPE; PhiMoE's for that length too). Layers alike
    share one table per call."""

    def __init__(self, d: int, positions: dict):
        self.d, self.positions = d, positions
        self.varies, self.factor = length_dependent(positions), attention_factor(positions)
        self.frequencies = torch.from_numpy(rotary_frequencies(d, positions))

    def __call__(self, ctx, seq: str, length: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        offset, rows = ctx.start(seq), ctx.positions.get(seq)
        frequencies, factor = self.frequencies, self.factor
        if self.varies:
            reach = int(rows.max()) + 1 if rows is not None else offset + length
            frequencies = torch.from_numpy(rotary_frequencies(self.d, self.positions, reach))
            factor = attention_factor(self.positions, reach)
        # seq in the key: rows of one sequence share positions, another's differ (a left-padded source)
        return ctx.cached(("rotary", seq, offset, length, frequencies.numpy().tobytes(), factor), lambda: rotation(
            frequencies, offset if rows is None else rows, length, x.device, x.dtype, factor))


def rotation(frequencies: torch.Tensor, offset, length: int, device, dtype,
             factor: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (L, 1, r/2) of rotary position embedding (Su et al. 2021) at positions
    offset..offset+L-1, or (B, L, 1, r/2) at each row's positions when ``offset`` is an int64
    (B, L) tensor: pair i turns by position x frequencies[i] (``rotary_frequencies``),
    computed in float64; both times ``factor`` (``attention_factor``)."""
    if isinstance(offset, torch.Tensor):
        positions = offset.to(device, torch.float64)
    else:
        positions = torch.arange(offset, offset + length, dtype=torch.float64, device=device)
    angles = positions[..., None] * frequencies.to(device)
    return tuple((t * factor).to(dtype)[..., None, :] for t in (angles.cos(), angles.sin()))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """(B, L, h, d) queries or keys with each pair (x_i, x_{i+r/2}) of their first r features
    rotated by ``rotation`` (r = d unless partial; transformers' rotate_half layout, as Llama's
    published weights expect); features r..d pass unchanged."""
    half = cos.shape[-1]
    x1, x2, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos, rest], -1)


def rotary(x: torch.Tensor, offset: int, base: float) -> torch.Tensor:
    """(B, L, h, d) queries or keys at positions offset..offset+L-1, every feature rotated."""
    frequencies = torch.from_numpy(rotary_frequencies(x.shape[-1], {"base": base, "fraction": 1.0}))
    return rotate(x, *rotation(frequencies, offset, x.shape[1], x.device, x.dtype))
