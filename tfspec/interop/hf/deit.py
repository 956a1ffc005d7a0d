"""DeiT (``model_type: deit``): transformers' DeiTModel, DeiTForImageClassification and
DeiTForImageClassificationWithTeacher as tfspec specs (Touvron et al. 2021, "Training
data-efficient image transformers & distillation through attention").

ViT (``vit.py``) with a learned distillation token after the class token, both with a position
of their own (``patches.distillation_token``). DeiTForImageClassification classifies the class
token; the class with the teacher adds a classifier of the distillation token and averages the
two logits (§5.1; the ``image_classification`` head's ``distillation``). Defaults are DeiTConfig's.
"""

from __future__ import annotations

from tfspec.interop.hf.family import Rule, register
from tfspec.interop.hf.vit import ViT

TEACHER = "DeiTForImageClassificationWithTeacher"


@register
class DeiT(ViT):
    model_type = "deit"
    title = "DeiT"
    architectures = {"DeiTModel": "", "DeiTForImageClassification": "deit.", TEACHER: "deit."}
    export_architecture = "DeiTModel"
    classifier_architecture = "DeiTForImageClassification"
    heads = ("classifier.", "cls_classifier.", "distillation_classifier.")

    def _patches(self, c: dict, where: str) -> dict:
        return super()._patches(c, where) | {"distillation_token": True}

    def _pooling(self, architecture: str) -> dict:
        return {"pooling": "class_token", "distillation": architecture == TEACHER}

    def _tokens(self, spec) -> tuple[str, ...]:
        return ("embeddings.cls_token", "embeddings.distillation_token")

    def _head_rules(self, spec) -> list[Rule]:
        if spec.head is None or not spec.head.distillation:
            return super()._head_rules(spec)
        return [Rule(f"{ours}.{p}", (f"{theirs}.{p}",)) for ours, theirs in (
            ("classifier", "cls_classifier"), ("distillation_classifier", "distillation_classifier"))
            for p in ("weight", "bias")]

    def dropped(self, architecture: str) -> dict[str, str]:
        if architecture == self.export_architecture:
            return {f"{h}*": f"a classifier, not part of {architecture}" for h in self.heads}
        return super().dropped(architecture)

    def architecture_for(self, spec) -> str:
        if spec.head is not None and spec.head.distillation:
            return TEACHER
        return super().architecture_for(spec)
