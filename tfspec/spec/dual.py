"""A dual encoder: a text tower and an image tower embedding into one space, scored by cosine
similarity (CLIP, Radford et al. 2021, §2.3 and Fig. 3; SigLIP, Zhai et al. 2023, §3): the
``dual`` section of a spec.

Why this shape. The two towers share no size: CLIP ViT-B/32 reads text at width 512 with 8
heads and images at width 768 with 12, each with its own depth, epsilon and activation. So each
tower is a whole spec rather than a stack under one set of widths, and each ends in the
``embedding`` head that sums it up into the shared space (``tfspec.spec.embedding_heads``: its
pooling and projection), which is also what a single-tower class is (CLIPTextModelWithProjection,
CLIPVisionModelWithProjection). The spec itself is the text tower (its vocabulary, token ids,
padding mask, learned positions and ``encoder`` stack, so every tool that reads a spec's tokens
reads them unchanged); ``dual.vision`` is the image tower, a complete encoder spec reading
``patches`` (``tfspec.spec.patches``), lowered into the same graph under ``vision.``
(``tfspec.ir.build.build_tower``). What is left to say here is how the two are scored.

The scores: text_embeds and image_embeds are the two heads' embeddings over their L2 norms;
logits_per_text = exp(t) text_embeds image_embeds^T (+ b), logits_per_image its transpose, t
(``logit_scale``) a learned log-temperature and b (``logit_bias``, SigLIP's sigmoid loss) a learned
bias.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from tfspec.spec.base import SpecModel

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec


class DualEncoder(SpecModel):
    """The image tower and the scores of every text against every image."""

    vision: "Spec"
    """The image tower: an encoder-only spec reading ``patches``, ending in an ``embedding`` head."""
    logit_scale: float = Field(2.6592, ge=-100.0, le=100.0)
    """The learned log-temperature t's starting value: the scores are exp(t) times the cosines
    (CLIP: log(1 / 0.07) = 2.6592)."""
    logit_bias: float | None = Field(None, ge=-1e6, le=1e6)
    """A learned bias added to every score, starting here (SigLIP: -10); None: none."""

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when the text tower ``spec`` and the image tower cannot be scored."""
        if spec.family != "encoder-only" or spec.patches is not None or spec.frames is not None:
            return "dual", "the spec is the text tower of a dual encoder: family encoder-only reading token ids"
        vision = self.vision
        if vision.patches is None or vision.family != "encoder-only" or vision.dual is not None:
            return "dual.vision", "the image tower is an encoder-only spec reading patches (without a dual of its own)"
        for field, tower in (("head", spec), ("dual.vision.head", vision)):
            if tower.head is None or tower.head.kind != "embedding":
                return field, "each tower of a dual encoder ends in an embedding head: {kind: embedding, ...}"
        if spec.head.width != vision.head.width:
            return "dual.vision.head.width", (f"the towers embed into one space: the image head's width "
                                              f"({vision.head.width}) must equal the text head's ({spec.head.width})")
        return None

    def lower(self, b: LayerBuilder, memory: str, tower: LayerBuilder) -> dict[str, str]:
        """Both towers' embeddings (the text tower's ``memory``, and the image tower ``tower`` that
        ``build_graph`` lowered beside it), their unit vectors and the scores: port -> node."""
        text = b.spec.head.lower(b, memory)
        image = self.vision.head.lower(tower, tower.ports["memory"])
        width = b.spec.head.width
        embeds = {side: b.op(f"dual.{side}_embeds", "unit_vectors", [x], component="similarity",
                             shape=(batch, width))
                  for side, x, batch in (("text", text, "B"), ("image", image, "N"))}
        params = {"scale": ((), f"constant:{self.logit_scale}")} | (
            {} if self.logit_bias is None else {"bias": ((), f"constant:{self.logit_bias}")})
        per_text = b.op("dual.logits_per_text", "pair_logits", [embeds["text"], embeds["image"]],
                        component="similarity", params=params, attrs={"width": width}, shape=("B", "N"))
        ties = {role: f"{per_text}.{role}" for role in params}  # one temperature, one bias
        per_image = b.op("dual.logits_per_image", "pair_logits", [embeds["image"], embeds["text"]],
                         component="similarity", params=ties, attrs={"width": width}, shape=("N", "B"))
        return {"logits_per_image": per_image, "logits_per_text": per_text, "text_embeds": embeds["text"],
                "image_embeds": embeds["image"]}
