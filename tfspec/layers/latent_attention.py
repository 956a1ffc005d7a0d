"""Multi-head latent attention (DeepSeek-V2, §2.1 of Liu et al. 2024; DeepSeek-V3, MiniCPM3):
causal self-attention whose keys and values are decoded from one small latent per position,
so the decoding cache holds that latent instead of every head's key and value.

Per position x (fields named as transformers' DeepseekV2Config):

    q      = W_qb RMSNorm(W_qa x)          (or W_q x without ``q_lora_rank``), per head
             [q_nope (qk_nope_head_dim) | q_pe (qk_rope_head_dim)]
    c, k_pe = W_kva x                      c: kv_lora_rank values, k_pe: one rotary key part
                                           shared by every head
    k_nope, v = W_kvb RMSNorm(c)            per head qk_nope_head_dim and v_head_dim
    score  = [q_nope, rope(q_pe)] . [k_nope, rope(k_pe)] x (qk_nope + qk_rope)^-0.5

Decoding caches RMSNorm(c) and rope(k_pe): kv_lora_rank + qk_rope_head_dim values per position
and layer, not per head (DeepSeek-V2: 576 against 32,768 for its 128 heads of 128 + 128), and
recomputes k_nope and v from them. Rotary positions rotate q_pe and k_pe only, in the
rotate-half layout (pairs (x_i, x_{i+r/2})).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from tfspec.layers.attention import Attention
from tfspec.layers.base import linear, register
from tfspec.positions import rotary
from tfspec.spec.base import field_error
from tfspec.spec.bounds import Width


@register
class LatentAttention(Attention):
    """Causal multi-head attention over keys and values decoded from a cached latent."""

    kind: Literal["latent_attention"] = "latent_attention"
    stem: ClassVar[str] = "self_attn"
    plain_causal: ClassVar[bool] = True
    op: ClassVar[str] = "latent_attention"
    q_lora_rank: Width | None = None
    """Width of the queries' compressed latent (DeepSeek-V2 1536, V3 1536); None: queries are
    one projection W_q (DeepSeek-V2-Lite)."""
    kv_lora_rank: Width
    """Width of the cached key/value latent c (DeepSeek-V2 and V3: 512)."""
    qk_nope_head_dim: Width
    """Query/key features per head without positions (DeepSeek-V2: 128)."""
    qk_rope_head_dim: Width
    """Rotated query/key features per head, the key's shared by the heads (DeepSeek-V2: 64)."""
    v_head_dim: Width
    """Value features per head (DeepSeek-V2: 128)."""
    latent_eps: Annotated[float, Field(gt=0, le=1)] = 1e-6
    """Epsilon of the RMSNorms on the latents (transformers' DeepSeek: always 1e-6, whatever
    rms_norm_eps says)."""

    @model_validator(mode="after")
    def _derived_sizes(self):
        for name in ("kv_heads", "d_k", "d_v"):
            if getattr(self, name) is not None:
                raise field_error(name, f"latent attention derives {name} (kv_heads = heads, d_k = qk_nope_head_dim + "
                                  "qk_rope_head_dim, d_v = v_head_dim): remove it")
        if self.score != "dot" or self.qk_norm != "none" or self.clip is not None:
            raise field_error("score", "latent attention scores are plain dot products: remove score, qk_norm "
                              "and clip")
        for name in ("output_gate", "head_scale", "learned_kv"):  # its op's lowerings do not read them
            if getattr(self, name):
                raise field_error(name, f"latent attention's op does not apply {name}: remove it or use "
                                  "causal_self_attention")
        return self

    def resolved(self, spec) -> LatentAttention:
        if self._filled is not None:
            return self
        layer = super().resolved(spec)
        filled = layer._filled
        heads = layer.heads
        layer = layer.model_copy(update={"kv_heads": heads, "d_k": self.qk_nope_head_dim + self.qk_rope_head_dim,
                                         "d_v": self.v_head_dim})
        layer._filled = filled
        return layer

    def check(self, spec) -> str | None:
        positions = self.resolved(spec).positions
        if positions.kind not in ("rotary", "none"):
            return f"latent attention rotates qk_rope_head_dim features; {positions.kind} positions are not supported"
        if positions.kind == "rotary" and (positions.fraction != 1.0 or self.qk_rope_head_dim % 2):
            return (f"latent attention rotates all qk_rope_head_dim ({self.qk_rope_head_dim}) features in pairs: it "
                    "must be even and the rotary fraction 1")
        if positions.kind == "rotary" and positions.decay_length is not None:
            return "latent attention rotates its keys' shared rotary part without decay: remove decay_length"
        return rotary.scaling_problem(positions, self.qk_rope_head_dim) if positions.kind == "rotary" else None

    def visible(self, q, k):
        return k <= q

    def pairs(self, s):
        return s.n * (s.n + 1) / 2

    @property
    def cached_width(self) -> int:
        """Values cached per position: the normalised latent c and the rotated key part."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def flops(self, s, dense=False):
        """The projections (queries through their latent or not, W_kva, W_kvb for every key,
        W^O), then scores over d_k = qk_nope + qk_rope and values over v_head_dim per head."""
        n, d, h = s.n, s.d, s.h
        d_k, q_rank, kv_rank = self.qk_nope_head_dim + self.qk_rope_head_dim, self.q_lora_rank, self.kv_lora_rank
        pairs = self.computed_pairs(s) if dense else self.pairs(s)
        q = 2 * n * d * h * d_k if q_rank is None else 2 * n * q_rank * (d + h * d_k)
        return {"q": q, "kv_a": 2 * n * d * self.cached_width,
                "kv_b": 2 * n * kv_rank * h * (self.qk_nope_head_dim + self.v_head_dim),
                "scores": 2 * pairs * h * d_k, "values": 2 * pairs * h * self.v_head_dim,
                "out": 2 * n * h * self.v_head_dim * d}

    def lower(self, b, name, x):
        s, layer = b.spec, self.resolved(b.spec)
        h, d = layer.heads, s.d_model
        rows = h * layer.d_k
        if layer.q_lora_rank is None:
            params = linear("q", rows, d, False)
        else:
            params = linear("qa", layer.q_lora_rank, d, False) | linear("qb", rows, layer.q_lora_rank, False)
            params["q_norm"] = ((layer.q_lora_rank,), "ones")
        params |= linear("kva", layer.cached_width, d, False) | {"kv_norm": ((layer.kv_lora_rank,), "ones")}
        params |= linear("kvb", h * (layer.qk_nope_head_dim + layer.v_head_dim), layer.kv_lora_rank, False)
        params |= linear("o", d, h * layer.v_head_dim, False)
        positions = layer.positions if layer.positions.in_attention else None
        attrs = {"kind": self.kind, "heads": h, "kv_heads": h, "d_k": layer.d_k, "d_v": layer.d_v,
                 "q_lora_rank": layer.q_lora_rank, "kv_lora_rank": layer.kv_lora_rank,
                 "qk_nope_head_dim": layer.qk_nope_head_dim, "qk_rope_head_dim": layer.qk_rope_head_dim,
                 "latent_eps": layer.latent_eps, "dropout": s.attention_dropout, "kv_seq": b.seq,
                 "scale": layer.score_scale(layer.d_k),
                 "positions": None if positions is None else positions.model_dump()}
        return b.op(name, "latent_attention", [x], attrs=attrs, params=params, layer=layer)
