"""The projection stage of attention in PyTorch: queries, keys and values as they leave W^Q,
W^K, W^V (one fused GEMM), with the projection options ``clip`` (OLMo's and DBRX's clip_qkv)
and ``qk_norm`` (Qwen3, Gemma 3, OLMo 2, Command R+); the ONNX twin is
``backends/onnx/lower/projection.py``. ``module`` is an attention module holding its node's
parameters and attributes (``MultiHeadAttention``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def project(module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Self-attention's (B, L, d) inputs -> (B, L, h, d_k) queries, (B, L, g, d_k) keys and
    (B, L, g, d_v) values, clipped; qk_norm comes after (``normed``)."""
    B, L = x.shape[:2]
    h, g, d_k, d_v = module.h, module.g, module.d_k, module.d_v
    q, k, v = clipped(module, F.linear(x, module.w_qkv, fused_bias(module))).split([h * d_k, g * d_k, g * d_v], -1)
    return q.view(B, L, h, d_k), k.view(B, L, g, d_k), v.view(B, L, g, d_v)


def project_queries(module, x: torch.Tensor) -> torch.Tensor:
    """Cross-attention's (B, L, d) decoder states -> (B, L, h, d_k) queries, clipped and normed."""
    q = clipped(module, F.linear(x, module.w_q, getattr(module, "b_q", None))).view(*x.shape[:2], module.h, module.d_k)
    return q if module.qk_norm == "none" else normed(module, q, "q")


def project_memory(module, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The (B, S, d) encoder output -> (B, g, S, d_k) keys, clipped and normed, and (B, g, S, d_v) values."""
    B, g = memory.shape[0], module.g
    kv = clipped(module, F.linear(memory, module.w_kv, fused_bias(module)))
    k, v = kv.split([g * module.d_k, g * module.d_v], -1)
    k = k.view(B, -1, g, module.d_k)
    k = k if module.qk_norm == "none" else normed(module, k, "k")
    return k.transpose(1, 2), v.view(B, -1, g, module.d_v).transpose(1, 2)


def fused_bias(module) -> torch.Tensor | None:
    """The bias of the fused Q/K/V (or K/V) GEMM: one parameter, or the parts' biases with
    zeros for an unbiased part (``fused_bias`` of tfspec.layers.attention)."""
    if module.bias_pieces is None:
        return None
    parts = [getattr(module, name) if name else module.w_o.new_zeros(rows) for name, rows in module.bias_pieces]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def clipped(module, x: torch.Tensor) -> torch.Tensor:
    """Projected queries, keys or values clamped to [-clip, clip] (OLMo's clip_qkv), or ``x``."""
    return x if module.clip is None else x.clamp(-module.clip, module.clip)


def normed(module, x: torch.Tensor, part: str) -> torch.Tensor:
    """``qk_norm`` of (B, L, heads, d) queries or keys: over each head's d features (one gain
    for all heads, one per head, or none), or over the whole projection (a gain per feature), in float32."""
    if module.qk_norm == "l2":  # no gain (Llama 4)
        return F.rms_norm(x.float(), x.shape[-1:], eps=module.norm_eps).to(x.dtype)
    weight, bias = getattr(module, f"{part}_norm"), getattr(module, f"{part}_norm_bias", None)
    if module.qk_norm == "per_head":  # the (heads, d) gain broadcasts over (B, L, heads, d)
        plain = F.rms_norm if module.norm_type == "rms" else F.layer_norm
        return weight * plain(x.float(), x.shape[-1:], eps=module.norm_eps).to(x.dtype)
    flat = x.flatten(2) if module.qk_norm == "all" else x
    if module.norm_type == "rms":
        y = weight * F.rms_norm(flat.float(), weight.shape, eps=module.norm_eps).to(x.dtype)
    else:
        y = F.layer_norm(flat, weight.shape, weight, bias, module.norm_eps)
    return y.view_as(x)
