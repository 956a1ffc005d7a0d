"""CoPE (``tfspec.positions.contextual``, Golovneva et al. 2024, eq. 3-5) in PyTorch, after the
mask: gates sigmoid of the masked logits (masked keys count 0), positions their sums from each
key to the query (a reversed cumulative sum), and q · e[p] read from the per-query products
q · e[t] with every table row t, interpolated between the two rows around p (eq. 5)."""

from __future__ import annotations

import torch

from . import PositionStage, position_stage


@position_stage("contextual")
class Contextual(PositionStage):
    def __init__(self, node):
        p = node.attrs["positions"]
        self.limit, self.mix = p["count_limit"], p["count_mix_heads"]

    def masked(self, ctx, module, q: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """(B, h, Lq, d_k) queries, (B, h, Lq, Lk) masked logits -> (B, h, Lq, Lk) term."""
        logits = scores
        if self.mix:  # the heads' logits mixed, then the keys the mask hid hidden again
            mask, causal = ctx.attention_mask(module.layer, module.q_seq, module.kv_seq, q.shape[2],
                                              scores.shape[-1], q.device)
            if causal:
                mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril(
                    scores.shape[-1] - scores.shape[-2])
            logits = torch.einsum("gh,bhij->bgij", module.cope_mix, scores)
            logits = logits if mask is None else logits.masked_fill(~mask, torch.finfo(scores.dtype).min)
        gates = torch.sigmoid(logits)  # (B, h, Lq, Lk): 0 at masked keys
        positions = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.limit - 1)  # p_ij = sum_{t >= j} g_it
        table = q @ module.cope_table.T  # (B, h, Lq, P): q_i · e[t]
        low = positions.floor()
        above = positions - low  # (B, h, Lq, Lk): the weight of the row above
        upper, lower = table.gather(-1, positions.ceil().long()), table.gather(-1, low.long())
        return upper * above + lower * (1 - above)
