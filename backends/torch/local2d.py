"""Local 2D attention (``tfspec.layers.local2d``) in PyTorch: each query block of h x w image
positions against its gathered memory block, so time and memory grow with the number of
positions, not its square nor its product with the image width."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .attention import tiled


@tiled("local_2d_self_attention")
def local_2d_attention(ctx, layer, seq: str, q, k, v, dropout: float) -> torch.Tensor:
    """(B, L, heads, d) queries, keys and values -> (B, L, heads*d_v): (B * blocks, heads, h*w,
    memory block) scores, the kind's mask applied inside each memory block."""
    B, L, heads, d_v = v.shape
    (h, w), (h_m, w_m), W = layer.block, layer.memory, layer.row
    rows, cols = tiles(layer, L)
    mask = ctx.cached(("local2d", layer, seq, L), lambda: _mask(layer, B, L, ctx.padding.get(seq), q.device))
    queries = _grid(q, rows * h, W, cols * w - W, 0, 0).view(B, rows, h, cols, w, heads, -1)
    queries = queries.permute(0, 1, 3, 5, 2, 4, 6).reshape(-1, heads, h * w, q.shape[-1])  # (B * blocks, heads, h*w, d)
    memory = [_memory(layer, _grid(t, rows * h, W, cols * w - W, h_m, w_m)) for t in (k, v)]
    y = F.scaled_dot_product_attention(queries, *memory, attn_mask=mask, dropout_p=dropout,
                                       scale=layer.scale)  # (B * blocks, heads, h*w, d)
    y = y.view(B, rows, cols, heads, h, w, d_v).permute(0, 1, 4, 2, 5, 3, 6).reshape(B, rows * h, cols * w, heads * d_v)
    return y[:, :, :W].reshape(B, -1, heads * d_v)[:, :L]


def tiles(layer, L: int) -> tuple[int, int]:
    """(block rows, block columns) of query blocks covering L positions of the image."""
    image_rows = -(-L // layer.row)
    return -(-image_rows // layer.block[0]), -(-layer.row // layer.block[1])


def _grid(t: torch.Tensor, rows: int, W: int, right: int, h_m: int, w_m: int, fill=0) -> torch.Tensor:
    """(B, L, ...) in raster order -> (B, h_m + rows + h_m, w_m + W + right + w_m, ...): the image,
    its missing positions and a frame of the memory flange filled with ``fill``."""
    B, L = t.shape[:2]
    t = torch.cat([t, t.new_full((B, rows * W - L, *t.shape[2:]), fill)], 1).view(B, rows, W, *t.shape[2:])
    return F.pad(t.movedim((1, 2), (-2, -1)), (w_m, w_m + right, h_m, h_m), value=fill).movedim((-2, -1), (1, 2))


def _memory(layer, grid: torch.Tensor) -> torch.Tensor:
    """(B, frame rows, frame columns, heads, d) -> (B * blocks, heads, memory block, d): each
    query block's rows_seen x cols_seen neighbourhood (causal: no rows below)."""
    (h, w), (h_m, _) = layer.block, layer.memory
    if layer.causal:
        grid = grid[:, :grid.shape[1] - h_m]
    heads, d = grid.shape[-2:]
    blocks = grid.unfold(1, layer.rows_seen, h).unfold(2, layer.cols_seen, w)  # (B, R, C, heads, d, rows, cols)
    return blocks.permute(0, 1, 2, 3, 5, 6, 4).reshape(-1, heads, layer.rows_seen * layer.cols_seen, d)


def _mask(layer, B: int, L: int, pad, device) -> torch.Tensor:
    """bool (B * blocks, 1, h*w, memory block): the kind's ``visible`` between each block's
    queries and the keys of its memory block that lie in the image and are not padding. Queries
    outside the image see their whole block (their outputs are dropped; no row is all masked)."""
    (h, w), (h_m, w_m), W = layer.block, layer.memory, layer.row
    rows, cols = tiles(layer, L)
    top = torch.arange(rows, device=device)[:, None, None, None] * h  # (R, 1, 1, 1)
    left = torch.arange(cols, device=device)[None, :, None, None] * w  # (1, C, 1, 1)
    qr = top + torch.arange(h, device=device).repeat_interleave(w)[:, None]  # (R, 1, h*w, 1)
    qc = left + torch.arange(w, device=device).repeat(h)[:, None]  # (1, C, h*w, 1)
    kr = top - h_m + torch.arange(layer.rows_seen, device=device).repeat_interleave(layer.cols_seen)
    kc = left - w_m + torch.arange(layer.cols_seen, device=device).repeat(layer.rows_seen)
    q, k = qr * W + qc, kr * W + kc  # (R, C, h*w, 1), (R, C, 1, M)
    inside = (kr >= 0) & (kc >= 0) & (kc < W) & (k < L)
    mask = (layer.visible(q, k) & inside) | ~((qc < W) & (q < L))
    if pad is not None:
        keys = _memory(layer, _grid(pad[..., None, None], rows * h, W, cols * w - W, h_m, w_m, True))[:, 0, :, 0]
        return (mask.flatten(0, 1)[None] & ~keys.view(pad.shape[0], -1, 1, keys.shape[-1])).flatten(0, 1)[:, None]
    return mask.flatten(0, 1).expand(B, -1, -1, -1).flatten(0, 1)[:, None]
