"""DINOv2 (``model_type: dinov2``): transformers' Dinov2Model and Dinov2ForImageClassification as
tfspec specs (Oquab et al. 2023, "DINOv2: Learning Robust Visual Features without Supervision").

ViT (``vit.py``) with LayerScale, a learned gain per feature on each sub-layer's output
(``sublayer_gain``, Touvron et al. 2021's CaiT §2, starting at layerscale_value), an MLP of
hidden_size x mlp_ratio features or, with ``use_swiglu_ffn`` (dinov2-giant), SwiGLU of two thirds of
them rounded up to a multiple of 8, and the position table always resized to the image's grid.
Dinov2Model has no pooler (its pooler_output is the class token's state); the classifier reads
the class token and the patches' mean side by side (``class_token_and_patch_mean``, the paper's
linear probe). Defaults are Dinov2Config's.
"""

from __future__ import annotations

from typing import ClassVar

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import ACTIVATION_NAMES, Rule, Source, activation, flag, number, register
from tfspec.interop.hf.layouts import Row, Split
from tfspec.interop.hf.vit import ViT

MAX_RATIO = 64
"""The largest mlp_ratio ``export`` looks for: published models use 4."""


def swiglu_width(hidden: int, ratio: int) -> int:
    """Dinov2SwiGLUFFN's hidden features: int(int(hidden x ratio) x 2 / 3), up to a multiple of 8."""
    return (int(int(hidden * ratio) * 2 / 3) + 7) // 8 * 8


@register
class Dinov2(ViT):
    model_type = "dinov2"
    title = "DINOv2"
    architectures = {"Dinov2Model": "", "Dinov2ForImageClassification": "dinov2."}
    export_architecture = "Dinov2Model"
    classifier_architecture = "Dinov2ForImageClassification"
    mapped = ("hidden_size", "num_hidden_layers", "num_attention_heads", "mlp_ratio", "hidden_act",
              "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps", "image_size", "patch_size",
              "num_channels", "qkv_bias", "layerscale_value", "use_swiglu_ffn", "use_mask_token")
    ignored = {"drop_path_rate": "stochastic depth (Huang et al. 2016): training only",
               **dict.fromkeys(("apply_layernorm", "reshape_hidden_states", "out_features", "out_indices",
                                "stage_names", "_out_features", "_out_indices"),
                               "the feature maps of Dinov2Backbone, which tfspec does not import")}
    defaults: ClassVar[dict] = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                                "mlp_ratio": 4, "layer_norm_eps": 1e-6, "image_size": 224, "patch_size": 14,
                                "hidden_act": "gelu", "layerscale_value": 1.0}
    pooled = False
    norms = ("norm1", "norm2")
    mlp = ("mlp.fc1", "mlp.fc2")
    renamed = ViT.renamed[:4] + (("mlp.down_proj", "mlp.weights_out"),)

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        gain = number(c, "layerscale_value", where, float)
        if gain <= 0:
            raise TfspecError(f"{where}: layerscale_value must be positive, got {gain}")
        data = super().spec_data(source) | {"sublayer_gain": gain}
        data["patches"] |= {"mask_token": flag(c, "use_mask_token", where, True)}
        return data

    def _ffn(self, c: dict, where: str, d: int) -> dict:
        ratio = number(c, "mlp_ratio", where)  # an int in transformers' DINOv2 configuration
        if flag(c, "use_swiglu_ffn", where):
            return {"d_ff": swiglu_width(d, ratio), "gated": True, "activation": "silu"}
        return {"d_ff": int(d * ratio), "activation": activation(c, "hidden_act", where, "gelu")}

    def _pooling(self, architecture: str) -> dict:
        return {"pooling": "class_token_and_patch_mean"}

    def rules(self, spec, architecture: str) -> list[Rule]:
        mask = [Rule("encoder.patch_embed.mask_token", ("embeddings.mask_token",), Row())] if spec.patches.mask_token \
            else []
        return super().rules(spec, architecture) + mask

    def _layer_rules(self, spec, ours: str, theirs: str) -> list[Rule]:
        return super()._layer_rules(spec, ours, theirs) + [
            Rule(ours + "self_attn_gain.gain", (f"{theirs}layer_scale1.lambda1",)),
            Rule(ours + "ffn_gain.gain", (f"{theirs}layer_scale2.lambda1",))]

    def _ffn_rules(self, spec, ours: str, theirs: str) -> list[Rule]:
        if not spec.gated:
            return super()._ffn_rules(spec, ours, theirs)
        halves = (spec.d_ff, spec.d_ff)  # weights_in: the gate's rows, then the linear branch's
        return [Rule(f"{ours}{w}_{n}", (f"{theirs}mlp.weights_in.{t}",), Split(halves, part))
                for n, part in (("1", 0), ("3", 1)) for w, t in (("w", "weight"), ("b", "bias"))] + [
                Rule(f"{ours}{w}_2", (f"{theirs}mlp.weights_out.{t}",)) for w, t in (("w", "weight"), ("b", "bias"))]

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if spec.sublayer_gain is None:
            return f"{self.title} scales each sub-layer's output (LayerScale): set sublayer_gain"
        if spec.sublayer_gain_shape != "feature":
            return f"{self.title}'s LayerScale has a gain per feature: set sublayer_gain_shape: feature"
        if self._ratio(spec) is None:
            swiglu = " (SwiGLU: 2/3 of it, up to a multiple of 8)" if spec.gated else ""
            return f"{self.title}'s MLP width is hidden_size x an integer mlp_ratio{swiglu}; d_ff {spec.d_ff} is none"
        return None

    def _ratio(self, spec) -> int | None:
        width = (lambda r: swiglu_width(spec.d_model, r)) if spec.gated else (lambda r: spec.d_model * r)
        return next((r for r in range(1, MAX_RATIO + 1) if width(r) == spec.d_ff), None)

    def _ffn_config(self, ffn) -> dict:
        return {}

    def config(self, spec) -> dict:
        config = super().config(spec) | {"mlp_ratio": self._ratio(spec), "use_swiglu_ffn": spec.gated,
                                          "layerscale_value": spec.sublayer_gain,
                                          "use_mask_token": spec.patches.mask_token}
        return config | ({} if spec.gated else {"hidden_act": ACTIVATION_NAMES.get(spec.activation, spec.activation)})
