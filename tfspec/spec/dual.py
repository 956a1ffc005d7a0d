"""A dual encoder: a text tower and an image tower embedding into one space, scored by cosine
similarity (CLIP, Radford et al. 2021, §2.3 and Fig. 3; SigLIP, Zhai et al. 2023, §3): the
``dual`` section of a spec.

Why this shape. The two towers share no size: CLIP ViT-B/32 reads text at width 512 with 8
heads and images at width 768 with 12, each with its own depth, epsilon and activation. So each
tower is a whole spec rather than a stack under one set of widths: the spec itself is the text
tower (its vocabulary, token ids, padding mask, learned positions and ``encoder`` stack, so every
tool that reads a spec's tokens reads them unchanged), and ``dual.vision`` is a complete image
encoder spec (``patches``, ``tfspec.spec.patches``), lowered into the same graph under
``vision.`` with its own widths. What joins them is here: how each tower is summed up into one
vector, the projections into the shared space of ``width`` features, and the learned
temperature (and SigLIP's bias) of the scores.

- ``text_pooling``: ``eos_token``, the first position holding ``vocab.eos_id`` (CLIP with its
  corrected eos_token_id); ``highest_id``, the position of the largest id (CLIP's configurations
  with eos_token_id 2, whose end-of-text token is the vocabulary's last); ``last_token``, the
  last position, padding or not (SigLIP, trained on text padded to its length).
- ``vision_pooling``: ``class_token`` (CLIP: the class token after the final norm) or
  ``attention_probe`` (SigLIP's multi-head attention pooling: a learned query attends over the
  patches, then a residual MLP; Lee et al. 2019's PMA, Zhai et al. 2022 "LiT" §3).
- ``text_projection``/``vision_projection``: ``linear`` (x W, CLIP), ``affine`` (x W + b,
  SigLIP's text head) or ``none`` (SigLIP's image side: the probe's output itself).

The scores: text_embeds and image_embeds are the pooled, projected vectors over their L2 norms;
logits_per_text = exp(t) text_embeds image_embeds^T (+ b), logits_per_image its transpose,
t (``logit_scale``) and b (``logit_bias``) learned scalars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from tfspec.spec.base import SpecModel
from tfspec.spec.bounds import Width

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec

Projection = Literal["none", "linear", "affine"]
OUTPUTS = ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds")
"""The ports a dual encoder's graph computes, as transformers' CLIPOutput and SiglipOutput name them."""


class DualEncoder(SpecModel):
    """The image tower and what joins it with the text tower (the spec itself)."""

    vision: "Spec"
    """The image tower: an encoder-only spec reading ``patches``, without a head of its own."""
    width: Width
    """Features of the shared embedding space (CLIP's projection_dim; SigLIP's projection_size)."""
    text_pooling: Literal["eos_token", "highest_id", "last_token"] = "eos_token"
    """Which position of the text tower's output stands for the text (the module docstring)."""
    vision_pooling: Literal["class_token", "attention_probe"] = "class_token"
    """How the image tower's output is summed up (the module docstring)."""
    text_projection: Projection = "linear"
    """The map of the pooled text vector into the shared space."""
    vision_projection: Projection = "linear"
    """The map of the pooled image vector into the shared space."""
    logit_scale: float = Field(2.6592, ge=-100.0, le=100.0)
    """The learned log-temperature t's starting value: the scores are exp(t) times the cosines
    (CLIP: log(1 / 0.07) = 2.6592)."""
    logit_bias: float | None = Field(None, ge=-1e6, le=1e6)
    """A learned bias added to every score, starting here (SigLIP's sigmoid loss: -10); None: none."""

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when the text tower ``spec`` or the image tower cannot be joined."""
        if spec.family != "encoder-only" or spec.patches is not None or spec.frames is not None:
            return "dual", "the spec is the text tower of a dual encoder: family encoder-only reading token ids"
        if spec.head is not None or spec.head_transform or spec.pooler:
            return "dual", "a dual encoder's outputs are its embeddings and scores: drop head, head_transform, pooler"
        vision = self.vision
        if vision.patches is None or vision.family != "encoder-only":
            return "dual.vision", "the image tower is an encoder-only spec reading patches: give it patches"
        if vision.head is not None or vision.pooler or vision.dual is not None:
            return "dual.vision", "the image tower ends in dual's pooling: drop its head, pooler and dual"
        if self.vision_pooling == "class_token" and not vision.patches.class_token:
            return "dual.vision_pooling", "class_token pooling reads the class token: set dual.vision.patches.class_token"
        for side, tower in (("text", spec), ("vision", vision)):
            if getattr(self, f"{side}_projection") == "none" and tower.d_model != self.width:
                return f"dual.{side}_projection", (f"without a projection the {side} tower's d_model "
                                                   f"({tower.d_model}) is the shared width ({self.width})")
        return None

    def lower(self, b: LayerBuilder, memory: str) -> dict[str, str]:
        """The image tower, both towers' pooled and projected vectors, their unit vectors and the
        scores: port -> node (``OUTPUTS``)."""
        from tfspec.ir.towers import build_tower

        s, tokens = b.spec, b.graph.ports["src"]
        text = b.op("dual.text_pool", "token_select", [memory, tokens], component="pooling",
                    attrs={"select": self.text_pooling, "eos_id": s.vocab.eos_id}, shape=("B", s.d_model))
        text = self._project(b, "text_projection", text, s.d_model, "B")
        tower, image = build_tower(b.graph, self.vision, "vision"), None
        vision_memory, v = tower.ports["memory"], self.vision
        if self.vision_pooling == "class_token":
            image = tower.op("pool", "token_pool", [vision_memory], component="pooling", shape=("N", v.d_model),
                             attrs={"reads": ["class"], "prefix": v.patches.prefix})
        else:
            image = tower.op("head", "attention_probe", [vision_memory], component="pooling", shape=("N", v.d_model),
                             attrs={"heads": v.heads, "activation": v.activation, "eps": v.norm_eps},
                             params=probe_params(v))
        image = self._project(b, "vision_projection", image, v.d_model, "N")
        embeds = {side: b.op(f"dual.{side}_embeds", "unit_vectors", [x], component="similarity",
                             shape=(batch, self.width))
                  for side, x, batch in (("text", text, "B"), ("image", image, "N"))}
        params = {"scale": ((), f"constant:{self.logit_scale}")} | (
            {} if self.logit_bias is None else {"bias": ((), f"constant:{self.logit_bias}")})
        per_text = b.op("dual.logits_per_text", "pair_logits", [embeds["text"], embeds["image"]],
                        component="similarity", params=params, attrs={"width": self.width}, shape=("B", "N"))
        ties = {role: f"{per_text}.{role}" for role in params}  # one temperature, one bias
        per_image = b.op("dual.logits_per_image", "pair_logits", [embeds["image"], embeds["text"]],
                         component="similarity", params=ties, attrs={"width": self.width}, shape=("N", "B"))
        return {"logits_per_image": per_image, "logits_per_text": per_text, "text_embeds": embeds["text"],
                "image_embeds": embeds["image"]}

    def _project(self, b: LayerBuilder, field: str, x: str, width: int, batch: str) -> str:
        kind = getattr(self, field)
        if kind == "none":
            return x
        params = {"weight": ((self.width, width), "xavier_uniform")} | (
            {"bias": ((self.width,), "zeros")} if kind == "affine" else {})
        return b.op(f"dual.{field}", "pooled_projection", [x], component="projection", params=params,
                    attrs={"inputs": width}, shape=(batch, self.width))


def probe_params(v: Spec) -> dict:
    """The attention probe's parameters (SiglipMultiheadAttentionPoolingHead): the query, the
    attention's joint in-projection and output (nn.MultiheadAttention, always biased), the norm
    and the MLP (the tower's d_ff, always biased)."""
    d = v.d_model
    return {"probe": ((d,), "normal:0.02"), "w_qkv": ((3 * d, d), "xavier_uniform"), "b_qkv": ((3 * d,), "zeros"),
            "w_o": ((d, d), "xavier_uniform"), "b_o": ((d,), "zeros"), "norm_weight": ((d,), "ones"),
            "norm_bias": ((d,), "zeros"), "w_1": ((v.d_ff, d), "xavier_uniform"), "b_1": ((v.d_ff,), "zeros"),
            "w_2": ((d, v.d_ff), "xavier_uniform"), "b_2": ((d,), "zeros")}
