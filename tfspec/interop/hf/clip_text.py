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

from tfspec.interop.hf.clip import CLIP, TOWER_IGNORED
from tfspec.interop.hf.family import Family, Rule, Source, check_config, number, register

PROJECTED = "CLIPTextModelWithProjection"


@register
class CLIPText(CLIP):
    model_type = "clip_text_model"
    title = "CLIP text tower"
    architectures = {"CLIPTextModel": "", PROJECTED: "text_model."}
    export_architecture = PROJECTED
    heads = ("text_projection.",)
    mapped = CLIP.text_fields + ("projection_dim",)
    ignored = {k: why for k, why in TOWER_IGNORED.items() if k != "projection_dim"}

    def check(self, config: dict, where: str) -> dict[str, str]:
        return check_config(self, config, where)

    def spec_data(self, source: Source) -> dict:
        c, where = self.text_defaults | source.config, source.where
        width = number(c, "projection_dim", where, default=512)  # read (its type checked) whether or not it is used
        width = width if source.architecture == PROJECTED else None
        return self._text(c, where, width)

    def rules(self, spec, architecture: str) -> list[Rule]:
        return self._text_rules(spec, "")

    def structure(self, spec) -> str | None:
        if reason := Family.structure(self, spec):
            return reason
        if spec.dual is not None or spec.patches is not None:
            return f"{self.title} reads token ids alone: drop dual and patches"
        if spec.head is None or spec.head.kind != "embedding":
            return f"{self.title} ends in an embedding head"
        return None

    def architecture_for(self, spec) -> str:
        return "CLIPTextModel" if spec.head.projection == "none" else PROJECTED

    def config(self, spec) -> dict:
        projected = spec.head.projection != "none"
        return {"architectures": [self.architecture_for(spec)], "model_type": self.model_type,
                **self._text_config(spec), **({"projection_dim": spec.head.width} if projected else {})}

    def outputs(self, architecture: str) -> dict[str, str]:
        embedding = "text_embeds" if architecture == PROJECTED else "pooler_output"
        return {"logits": embedding, "memory": "last_hidden_state"}
