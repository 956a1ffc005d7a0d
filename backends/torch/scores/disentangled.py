"""DeBERTa's disentangled attention (``tfspec.layers.disentangled``) in PyTorch: the
content-to-position and position-to-content products of each query and key with the stack's
relative table projected by the layer's own query and key weights."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tfspec.ir.positions import disentangled_rows
from tfspec.layers.disentangled import NORM, NORM_BIAS, TABLE

from ..projection import fused_bias
from . import score_term


@score_term("disentangled")
class Disentangled:
    """What one attention node needs: its table's row per distance, its terms and scale."""

    def __init__(self, node):
        a = node.attrs
        self.rows = torch.from_numpy(disentangled_rows(a["positions"]))
        self.terms, self.scale, self.heads = a["positions"]["terms"], a["scale"], a["heads"]
        self.norm = (a["norm_type"], a["norm_eps"]) if NORM in node.params else None

    def __call__(self, ctx, module, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """(B, h, Lq, Lk) for (B, h, Lq, d) queries and (B, h, Lk, d) keys, the queries being
        the last Lq of the Lk positions."""
        (lq, lk), reach = (q.shape[2], k.shape[2]), len(self.rows) // 2
        pos_q, pos_k = self._projected(module)  # (h, R, d)
        queries = torch.arange(lk - lq, lk, device=q.device)[:, None]
        distance = (queries - torch.arange(lk, device=q.device)[None, :]).clamp(-reach, reach)
        row = self.rows.to(q.device)[distance + reach]  # (Lq, Lk): the table row of i - j
        score = 0
        if "c2p" in self.terms:  # q_i · P^K_row(i, j)
            score = score + torch.gather(q @ pos_k.transpose(-1, -2), -1, row.expand(*q.shape[:2], lq, lk))
        if "p2c" in self.terms:  # k_j · P^Q_row(i, j): rows of (key j, row) read at row(i, j)
            by_key = torch.gather(k @ pos_q.transpose(-1, -2), -1, row.T.expand(*k.shape[:2], lk, lq))
            score = score + by_key.transpose(-1, -2)
        return score * self.scale

    def _projected(self, module) -> tuple[torch.Tensor, torch.Tensor]:
        """The (normalised) table through the layer's query and key projections: (h, R, d) each."""
        table = getattr(module, TABLE)
        if self.norm is not None:
            kind, eps = self.norm
            weight, bias = getattr(module, NORM), getattr(module, NORM_BIAS, None)
            table = (F.layer_norm(table, weight.shape, weight, bias, eps) if kind == "layer"
                     else weight * F.rms_norm(table, weight.shape, eps=eps))
        width = self.heads * module.d_k
        q, k = F.linear(table, module.w_qkv, fused_bias(module))[:, :2 * width].split(width, -1)
        return tuple(t.view(len(table), self.heads, -1).transpose(0, 1) for t in (q, k))
