"""CLIP's image tower alone (``model_type: clip_vision_model``): transformers'
CLIPVisionModelWithProjection and CLIPVisionModel as an encoder-only spec reading ``patches`` and
ending in an ``embedding`` head (``tfspec.spec.embedding_heads``).

CLIPModel's image side (``clip.py``) read from a CLIPVisionConfig: the ViT with CLIP's
pre_layrnorm, its class token through post_layernorm (the head's ``norm``; the last hidden
states stay unnormalised, as transformers' ``last_hidden_state``); WithProjection maps it into
projection_dim features without bias (``image_embeds``, not normalised), CLIPVisionModel gives it
as it is (``pooler_output``). The embedding is the ``logits`` port. Defaults are CLIPVisionConfig's.
"""

from __future__ import annotations

from tfspec.interop.hf.clip import CLIP, TOWER_IGNORED
from tfspec.interop.hf.family import Family, Rule, Source, check_config, number, register

PROJECTED = "CLIPVisionModelWithProjection"


@register
class CLIPVision(CLIP):
    model_type = "clip_vision_model"
    title = "CLIP image tower"
    architectures = {"CLIPVisionModel": "", PROJECTED: "vision_model."}
    export_architecture = PROJECTED
    heads = ("visual_projection.",)
    mapped = CLIP.vision_fields + ("projection_dim",)
    ignored = {k: why for k, why in TOWER_IGNORED.items() if k != "projection_dim"}

    def check(self, config: dict, where: str) -> dict[str, str]:
        return check_config(self, config, where)

    def spec_data(self, source: Source) -> dict:
        c, where = self.vision_defaults | source.config, source.where
        width = number(c, "projection_dim", where, default=512)  # read (its type checked) whether or not it is used
        width = width if source.architecture == PROJECTED else None
        return self._vision(c, where, width)

    def rules(self, spec, architecture: str) -> list[Rule]:
        return self._vision_rules(spec, "", "")

    def structure(self, spec) -> str | None:
        if reason := Family.structure(self, spec):
            return reason
        if spec.dual is not None or spec.patches is None:
            return f"{self.title} reads image patches alone: give the spec patches and no dual"
        if spec.head is None or spec.head.kind != "embedding":
            return f"{self.title} ends in an embedding head"
        return None

    def architecture_for(self, spec) -> str:
        return "CLIPVisionModel" if spec.head.projection == "none" else PROJECTED

    def config(self, spec) -> dict:
        projected = spec.head.projection != "none"
        return {"architectures": [self.architecture_for(spec)], "model_type": self.model_type,
                **self._vision_config(spec), **({"projection_dim": spec.head.width} if projected else {})}

    def outputs(self, architecture: str) -> dict[str, str]:
        embedding = "image_embeds" if architecture == PROJECTED else "pooler_output"
        return {"logits": embedding, "memory": "last_hidden_state"}
