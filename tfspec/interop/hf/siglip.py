"""SigLIP (``model_type: siglip``): transformers' SiglipModel as one tfspec spec with a ``dual``
section (Zhai et al. 2023, "Sigmoid Loss for Language Image Pre-Training").

CLIP (``clip.py``) with these differences: the text tower reads both ways and stands for the text
by its last position (padding or not: SigLIP pads text to its length), mapped into
projection_size features with a bias (``text_model.head``); the image tower has no class token
and no norm before its layers, its convolution a bias, its last hidden states normed
(``post_layernorm``) and summed up by the attention probe (``vision_model.head``: a learned
query, multi-head attention, a residual MLP), whose output is the image embedding itself (no
projection); the scores get a learned bias, for the sigmoid of each pair. Defaults are
SiglipConfig's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tfspec.errors import TfspecError
from tfspec.interop.hf.clip import CLIP, TOWER_IGNORED
from tfspec.interop.hf.family import Rule, flag, norm_rules, number, register
from tfspec.interop.hf.layouts import Layout


@dataclass(frozen=True)
class Scalar(Layout):
    """The IR's scalar stored as a one-element vector (SigLIP's logit_scale and logit_bias)."""

    def hf_shapes(self, shape, count):
        return [(1,)]

    def to_ir(self, parts):
        return parts[0].reshape(())

    def to_hf(self, value, count):
        return [value.reshape(1)]


@dataclass(frozen=True)
class Probe(Layout):
    """The IR's (d,) query stored as (1, 1, d) (SiglipMultiheadAttentionPoolingHead.probe)."""

    def hf_shapes(self, shape, count):
        return [(1, 1, *shape)]

    def to_ir(self, parts):
        return parts[0][0, 0]

    def to_hf(self, value, count):
        return [value[None, None]]


@register
class Siglip(CLIP):
    model_type = "siglip"
    title = "SigLIP"
    architectures = {"SiglipModel": ""}
    export_architecture = "SiglipModel"
    mapped = ("text_config", "vision_config")
    text_fields = CLIP.text_fields + ("projection_size",)
    vision_fields = CLIP.vision_fields + ("vision_use_head",)
    text_defaults: ClassVar[dict] = {"vocab_size": 32000, "hidden_size": 768, "intermediate_size": 3072,
                                     "num_hidden_layers": 12, "num_attention_heads": 12, "max_position_embeddings": 64,
                                     "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6, "pad_token_id": 1,
                                     "bos_token_id": 49406, "eos_token_id": 49407}
    vision_defaults: ClassVar[dict] = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                                       "num_attention_heads": 12, "image_size": 224, "patch_size": 16,
                                       "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6}
    causal = False

    def _tower_ignored(self, side: str) -> dict[str, str]:
        return {k: why for k, why in TOWER_IGNORED.items() if k != "projection_dim"}

    def _vocab(self, vocab: dict) -> dict:
        """SiglipTextConfig's default bos and eos ids (49406, 49407) lie outside its 32000-token
        vocabulary, and nothing SiglipModel computes reads them (it pools the last position): an id
        outside the vocabulary becomes the pad id in the spec."""
        return vocab | {k: vocab["pad_id"] for k in ("bos_id", "eos_id") if vocab[k] >= vocab["size"]}

    def _text_head(self, text: dict, width: int | None, where: str) -> dict:
        return self._head("last_token", width, number(text, "hidden_size", where), "affine")

    def _vision(self, c: dict, where: str, width: int | None) -> dict:
        """No class token, no norm before the layers, post_layernorm on every state, the probe."""
        if not flag(c, "vision_use_head", where, True):
            raise TfspecError(f"{where}: vision_use_head: false is not supported; SiglipModel's image embedding is "
                              "the attention probe's output")
        data = super()._vision(c, where, width)
        head = {"kind": "embedding", "width": width, "pooling": "attention_probe", "projection": "none"}
        return data | {"embed_norm": False, "final_norm": True, "head": head,
                       "patches": data["patches"] | {"bias": True, "class_token": False}}

    def _width(self, c: dict, text: dict, where: str) -> int:
        return number(text, "projection_size", where, default=number(text, "hidden_size", where))

    def _dual(self, c: dict, vision: dict, where: str, width: int) -> dict:
        return super()._dual(c, vision, where, width) | {"logit_scale": 0.0, "logit_bias": 0.0}

    def rules(self, spec, architecture: str) -> list[Rule]:
        return self._text_rules(spec) + self._vision_rules(spec.dual.vision, "vision.") + [
            Rule("dual.logits_per_text.scale", ("logit_scale",), Scalar()),
            Rule("dual.logits_per_text.bias", ("logit_bias",), Scalar())]

    def _text_head_rules(self, spec) -> list[Rule]:
        return [Rule(f"head.projection.{p}", (f"text_model.head.{p}",)) for p in ("weight", "bias")]

    def _vision_head_rules(self, v, ours: str, theirs: str) -> list[Rule]:
        """The patch bias, post_layernorm and the attention probe."""
        head, probe = f"{theirs}head.", f"{ours}head.probe."
        return [Rule(f"{ours}encoder.patch_embed.bias", (f"{theirs}embeddings.patch_embedding.bias",)),
                *norm_rules(f"{ours}encoder.norm", f"{theirs}post_layernorm"),
                Rule(probe + "probe", (head + "probe",), Probe()),
                Rule(probe + "w_qkv", (head + "attention.in_proj_weight",)),
                Rule(probe + "b_qkv", (head + "attention.in_proj_bias",)),
                Rule(probe + "w_o", (head + "attention.out_proj.weight",)),
                Rule(probe + "b_o", (head + "attention.out_proj.bias",)),
                Rule(probe + "norm_weight", (head + "layernorm.weight",)),
                Rule(probe + "norm_bias", (head + "layernorm.bias",)),
                *[Rule(f"{probe}{w}_{n}", (f"{head}mlp.fc{n}.{t}",)) for n in "12"
                  for w, t in (("w", "weight"), ("b", "bias"))]]

    def _joint_config(self, spec) -> dict:
        return {}

    def _text_config(self, spec) -> dict:
        return super()._text_config(spec) | {"projection_size": spec.head.width}
