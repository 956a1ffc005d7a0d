"""Rotary positions (Su et al. 2021; Llama, GPT-NeoX, Qwen, Gemma, ...) in PyTorch: queries and
keys turned by their positions as they leave the projection, so q·k depends on distance only.
Fused kernels still apply: the stage adds nothing to the scores."""

from __future__ import annotations

import torch

from tfspec.ir.positions import rotary_frequencies
from tfspec.ir.rope_scaling import attention_factor, length_dependent

from . import PositionStage, position_stage


@position_stage("rotary")
class Rotary(PositionStage):
    def __init__(self, node):
        self.seq, self.rotation = node.shape[1], Rotation(node.attrs["d_k"], node.attrs["positions"])

    def turn(self, ctx, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, L, h, d) queries and (B, L, g, d) keys, each rotated by its position."""
        cos, sin = self.rotation(ctx, self.seq, q.shape[1], q)  # one rotation table per call, for every layer
        return rotate(q, cos, sin), rotate(k, cos, sin)


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
