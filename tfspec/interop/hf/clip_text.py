"""CLIP's text tower alone (``model_type: clip_text_model``): transformers' CLIPTextModelWithProjection
and CLIPTextModel as an encoder-only spec ending in an ``embedding`` head
(``tfspec.spec.embedding_heads``).

CLIPModel's text side (``clip.py``) read from a CLIPTextConfig: the causal tower, pooled at the
end-of-text token; WithProjection maps the pooled vector into projection_dim features without bias
(``text_embeds``, not normalised), CLIPTextModel gives it as it is (``pooler_output``). Both give the
final-normed states (``last_hidden_state``, the ``memory`` port). The embedding is the ``logits``
port. Defaults are CLIPTextConfig's.
"""

from __future__ import annotations

from tfspec.interop.hf.clip import CLIP, TOWER_IGNORED, OneTower
from tfspec.interop.hf.family import register


@register
class CLIPText(OneTower):
    model_type = "clip_text_model"
    title = "CLIP text tower"
    side, bare, embeds = "text", "CLIPTextModel", "text_embeds"
    architectures = {"CLIPTextModel": "", "CLIPTextModelWithProjection": "text_model."}
    export_architecture = "CLIPTextModelWithProjection"
    heads = ("text_projection.",)
    mapped = CLIP.text_fields + ("projection_dim",)
    ignored = {k: why for k, why in TOWER_IGNORED.items() if k != "projection_dim"}
