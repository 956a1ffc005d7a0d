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

from tfspec.interop.hf.clip import CLIP, TOWER_IGNORED, OneTower
from tfspec.interop.hf.family import register


@register
class CLIPVision(OneTower):
    model_type = "clip_vision_model"
    title = "CLIP image tower"
    side, bare, embeds = "vision", "CLIPVisionModel", "image_embeds"
    architectures = {"CLIPVisionModel": "", "CLIPVisionModelWithProjection": "vision_model."}
    export_architecture = "CLIPVisionModelWithProjection"
    heads = ("visual_projection.",)
    mapped = CLIP.vision_fields + ("projection_dim",)
    ignored = {k: why for k, why in TOWER_IGNORED.items() if k != "projection_dim"}
