"""One embedding per input, a tower's summary in a space shared with another (CLIP, SigLIP): the
``head: {kind: embedding}`` of an encoder-only spec, one of ``tfspec.spec.heads.Head``'s kinds.
Alone it is transformers' CLIPTextModelWithProjection or CLIPVisionModelWithProjection (the
embedding, unnormalised, is the ``logits`` port); the two towers of a dual encoder
(``tfspec.spec.dual``) each end in one, and the scores compare their unit vectors.

How the encoder's output is summed up (``pooling``):

- ``eos_token``: the first position holding ``vocab.eos_id`` (CLIP's text, its corrected
  eos_token_id); ``highest_id``: the position of the largest id (CLIP configurations keeping the
  old eos_token_id 2, whose end-of-text token is the vocabulary's last); ``last_token``: the last
  position, padding or not (SigLIP's text, padded to its length in training);
- ``class_token``: the image's class token (CLIP's image tower, normalised by the head's ``norm``:
  its ``post_layernorm``);
- ``attention_probe``: a learned query attends over the patches with the spec's heads, then a
  residual MLP of the spec's d_ff (SigLIP's image tower: SiglipMultiheadAttentionPoolingHead; the
  pooling by multi-head attention of Lee et al. 2019, §3.1).

Then ``projection``: ``linear`` (x W, CLIP), ``affine`` (x W + b, SigLIP's text head) or
``none`` (SigLIP's image side, CLIPTextModel's pooler_output: the pooled vector itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from tfspec.spec.base import SpecModel
from tfspec.spec.bounds import Width

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec

TEXT_POOLING = ("eos_token", "highest_id", "last_token")
"""The poolings that read the token ids (the others read image patches)."""


class EmbeddingHead(SpecModel):
    """The pooled, projected vector of each input (B, width)."""

    kind: Literal["embedding"] = "embedding"
    width: Width
    """Features of the embedding (CLIP's projection_dim, SigLIP's projection_size)."""
    pooling: Literal["eos_token", "highest_id", "last_token", "class_token", "attention_probe"]
    """Which part of the encoder's output stands for the input (the module docstring)."""
    projection: Literal["none", "linear", "affine"] = "linear"
    """The map of the pooled vector to the embedding (the module docstring)."""
    norm: bool = False
    """Normalise the pooled vector with the spec's norm before the projection (CLIP's image tower:
    its post_layernorm of the class token, while its last hidden states stay unnormalised, so the
    spec sets final_norm: false)."""

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when ``spec`` cannot carry this head."""
        text = self.pooling in TEXT_POOLING
        if text and (spec.patches is not None or spec.frames is not None):
            return "head.pooling", f"pooling {self.pooling} reads token ids: use class_token or attention_probe"
        if not text and spec.patches is None:
            return "head.pooling", f"pooling {self.pooling} reads image patches: give the spec patches"
        if self.pooling == "class_token" and not spec.patches.class_token:
            return "head.pooling", "class_token pooling reads the class token: set patches.class_token"
        if self.projection == "none" and spec.d_model != self.width:
            return "head.width", (f"without a projection the embedding is the pooled vector: width "
                                  f"({self.width}) must equal d_model ({spec.d_model})")
        return None

    @property
    def transform(self) -> None:
        """No dense layer before the head (what callers of the text heads ask)."""
        return None

    def lower(self, b: LayerBuilder, memory: str, pooled: str | None = None) -> str:
        """(B, width): the pooled vector of ``memory``, projected."""
        s, batch = b.spec, "B"
        if self.pooling in TEXT_POOLING:
            x = b.op("head.pool", "token_select", [memory, b.graph.ports["src"]], component="head",
                     attrs={"select": self.pooling, "eos_id": s.vocab.eos_id}, shape=(batch, s.d_model))
        elif self.pooling == "class_token":
            x = b.op("head.pool", "token_pool", [memory], component="head", shape=(batch, s.d_model),
                     attrs={"reads": ["class"], "prefix": s.patches.prefix})
        else:
            x = b.op("head.probe", "attention_probe", [memory], component="head", shape=(batch, s.d_model),
                     attrs={"heads": s.heads, "activation": s.activation, "eps": s.norm_eps}, params=probe_params(s))
        if self.norm:
            x = b.norm("head.norm", x, rows=(batch,))
        if self.projection == "none":
            return x
        params = {"weight": ((self.width, s.d_model), "xavier_uniform")} | (
            {"bias": ((self.width,), "zeros")} if self.projection == "affine" else {})
        return b.op("head.projection", "pooled_projection", [x], component="head", params=params,
                    attrs={"inputs": s.d_model}, shape=(batch, self.width))


def probe_params(s: Spec) -> dict:
    """The attention probe's parameters (SiglipMultiheadAttentionPoolingHead): the query, the
    attention's joint in-projection and output (nn.MultiheadAttention, always biased), the norm
    and the MLP (the spec's d_ff, always biased)."""
    d = s.d_model
    return {"probe": ((d,), "normal:0.02"), "w_qkv": ((3 * d, d), "xavier_uniform"), "b_qkv": ((3 * d,), "zeros"),
            "w_o": ((d, d), "xavier_uniform"), "b_o": ((d,), "zeros"), "norm_weight": ((d,), "ones"),
            "norm_bias": ((d,), "zeros"), "w_1": ((s.d_ff, d), "xavier_uniform"), "b_1": ((s.d_ff,), "zeros"),
            "w_2": ((d, s.d_ff), "xavier_uniform"), "b_2": ((d,), "zeros")}
