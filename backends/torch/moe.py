"""The PyTorch lowering of the IR ``moe`` op (``tfspec.layers.moe``): route each position to
its top_k experts (softmax or sigmoid scores, DeepSeek-V3's groups and score bias) and run each expert
only on the positions routed to it, as transformers' Mixtral and DeepSeek-V3 do, so training and decoding
pay for top_k experts per token, not E. Switch's expert capacity drops the positions past it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .layers import ACTIVATIONS
from .registry import OpModule, lowering


@lowering("moe")
class MixtureOfExperts(OpModule):
    def __init__(self, node, graph):
        super().__init__(node, graph)
        a = node.attrs
        self.experts, self.top_k, self.normalize = a["experts"], a["top_k"], a["normalize"]
        self.act, self.gated, self.p = ACTIVATIONS[a["activation"]], a["gated"], a["dropout"]
        self.balance, self.z_loss, self.seq = a.get("balance", 0.0), a.get("z_loss", 0.0), node.shape[1]
        self.scoring, self.groups, self.top_groups = a["scoring"], a["groups"], a["top_groups"]
        self.mixer_eps = a.get("mixer_eps", 0.01)
        self.routed_scale, self.capacity = a["routed_scale"], a.get("capacity")
        self.glu_limit, self.glu_shift = a.get("glu_limit"), a.get("glu_shift", 0.0)
        self.input_weighted = a.get("input_weighted", False)

    def forward(self, ctx, x):
        B, L, d = x.shape
        flat = x.reshape(-1, d)
        logits = F.linear(flat, self.w_router, getattr(self, "b_router", None)).float()
        probs = torch.softmax(logits, -1) if self.scoring != "sigmoid" else torch.sigmoid(logits)  # (N, E), float32
        chosen = self._choose(probs)  # (N, k)
        weights = probs.gather(1, chosen) if self.scoring != "sparsemixer" else self._mixed(logits, chosen)
        if ctx.training and (self.balance or self.z_loss):
            ctx.aux_losses.append(self._router_losses(ctx, logits, probs, chosen))
        if self.normalize:  # DeepSeek-V3's floor keeps sigmoid scores that all underflow from giving 0 / 0
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        weights = (weights * self.routed_scale).to(x.dtype)
        if self.capacity is not None:
            chosen = self._within_capacity(chosen, B)
        out = torch.zeros_like(flat)
        for expert in range(self.experts):
            rows, slot = (chosen == expert).nonzero(as_tuple=True)
            if rows.numel():
                weight, routed = weights[rows, slot, None], flat[rows]
                if self.input_weighted:  # Llama 4: expert(p x)
                    routed = routed * weight
                y = self._ffn(ctx, routed, self.w_1[expert], self.w_3[expert] if self.gated else None,
                              self.w_2[expert], *self._biases(expert), routed=True)
                out.index_add_(0, rows, y if self.input_weighted else y * weight)
        if getattr(self, "w_shared_1", None) is not None:
            y = self._ffn(ctx, flat, self.w_shared_1, getattr(self, "w_shared_3", None), self.w_shared_2)
            if getattr(self, "w_shared_gate", None) is not None:  # Qwen2-MoE: sigmoid(x w_gate) scales it
                y = torch.sigmoid(F.linear(flat, self.w_shared_gate)) * y
            out = out + y
        return out.view(B, L, d)

    def _choose(self, probs: torch.Tensor) -> torch.Tensor:
        """The top_k experts by score (plus the score bias), among the top_groups groups whose
        two best sum highest (transformers' DeepseekV3TopkRouter)."""
        scores = probs if getattr(self, "score_bias", None) is None else probs + self.score_bias
        if self.top_groups < self.groups:
            grouped = scores.view(len(scores), self.groups, -1)  # (N, G, E / G)
            best = grouped.topk(2, -1).values.sum(-1).topk(self.top_groups, -1).indices  # (N, top_groups)
            keep = torch.zeros_like(grouped[..., 0], dtype=torch.bool).scatter_(1, best, True)  # (N, G)
            scores = grouped.masked_fill(~keep[..., None], float("-inf")).view_as(scores)
        return scores.topk(self.top_k, -1).indices

    def _mixed(self, logits: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """SparseMixer's weights (transformers' ``sparsemixer`` in eval mode): for the t-th chosen
        expert, 1 / the sum of exp(s - s_t) over the experts not chosen before it whose logit s is
        within 2 eps of s_t relative to max(|s|, s_t)."""
        weights, earlier = [], torch.zeros_like(logits, dtype=torch.bool)
        for t in range(chosen.shape[1]):
            top = logits.gather(1, chosen[:, t:t + 1])  # (N, 1)
            far = (top - logits) / logits.abs().clamp(min=top) > 2 * self.mixer_eps
            near = torch.exp(logits - top).masked_fill(far | earlier, 0.0)
            weights.append(1.0 / near.sum(-1))
            earlier = earlier.scatter(1, chosen[:, t:t + 1], True)
        return torch.stack(weights, -1)

    def _within_capacity(self, chosen: torch.Tensor, batch: int) -> torch.Tensor:
        """The top-1 choices with -1 (no expert) where the position comes after ``capacity``
        earlier positions of its sequence routed to the same expert (transformers'
        SwitchTransformersTop1Router: a cumulative count along the sequence)."""
        routed = F.one_hot(chosen[:, 0], self.experts).view(batch, -1, self.experts)  # (B, L, E)
        rank = (routed.cumsum(1) * routed).sum(-1).view(-1, 1)  # (N, 1): 1 for an expert's first position
        return chosen.masked_fill(rank > self.capacity, -1)

    def _router_losses(self, ctx, logits, probs, chosen) -> torch.Tensor:
        """The load-balancing loss E x sum_e f_e P_e (transformers' ``load_balancing_loss_func``:
        f_e counts every one of a token's top_k choices) and the router z-loss, over the batch's
        real tokens, times their number: the training loss is a sum over tokens."""
        pad = ctx.padding.get(self.seq)
        if pad is not None:
            keep = ~pad.reshape(-1)
            logits, probs, chosen = logits[keep], probs[keep], chosen[keep]
        n = len(probs)
        routed = F.one_hot(chosen, self.experts).float().sum((0, 1)) / n  # (E,)
        loss = self.balance * self.experts * (routed * probs.mean(0)).sum() * n
        return loss + self.z_loss * torch.logsumexp(logits, -1).square().sum()

    def _biases(self, expert: int) -> tuple:
        """The expert's biases b1, b2, b3 (NLLB-MoE's two, gpt-oss's three), None where absent."""
        return tuple(None if getattr(self, role, None) is None else getattr(self, role)[expert]
                     for role in ("b_1", "b_2", "b_3"))

    def _ffn(self, ctx, x, w_1, w_3, w_2, b_1=None, b_2=None, b_3=None, routed=False):
        """One expert: act(x W1 + b1) (* (x W3 + b3) when gated), dropout, then W2 (+ b2); a routed
        expert's branches clamped by ``glu_limit`` and the linear one shifted by ``glu_shift`` (gpt-oss)."""
        gate = F.linear(x, w_1, b_1)
        if w_3 is None:
            h = self.act(gate)
        else:
            up = F.linear(x, w_3, b_3)
            if routed and self.glu_limit is not None:
                gate, up = gate.clamp(max=self.glu_limit), up.clamp(-self.glu_limit, self.glu_limit)
            h = self.act(gate) * (up + self.glu_shift if routed and self.glu_shift else up)
        if self.p and ctx.training:
            h = F.dropout(h, self.p)
        return F.linear(h, w_2, b_2)
