"""BEiT (``model_type: beit``): transformers' BeitModel and BeitForImageClassification as tfspec
specs (Bao et al. 2022, "BEiT: BERT Pre-Training of Image Transformers").

ViT (``vit.py``) with what BEiT changes: a relative position bias over the 2-D offsets of patches
in self-attention's logits (``positional: relative_bias_2d``: one table per layer with
use_relative_position_bias, one shared by the stack with use_shared_relative_position_bias), the
absolute positions optional (use_absolute_position_embeddings, off by default; resized bicubically
for other image sizes as transformers always does), LayerScale on each sub-layer's output
(lambda_1, lambda_2: ``sublayer_gain``, from layer_scale_init_value; none when it is 0), query and
value biases but no key bias, and the pooler: with use_mean_pooling (the default) the patches'
mean through a LayerNorm and no final norm, else the final norm and the class token
(``image_pooler``); the classifier reads the pooler's output (``pooling: pooler``). Other image
sizes are computed as transformers computes them (the relative table resized bilinearly; its
interpolate_pos_encoding then resizes the bias to the size it already has). Data2VecVision
(``data2vec_vision.py``) is the same computation. Defaults are BeitConfig's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Rule, Source, flag, norm_rules, number, register
from tfspec.interop.hf.layouts import Row
from tfspec.interop.hf.vit import ViT

TABLE = "relative_position_bias.relative_position_bias_table"
"""The relative bias table's name below a layer's ``attention.attention.`` or the encoder."""


@dataclass(frozen=True)
class BatchedVector(Row):
    """The IR vector stored as a (1, 1, d) tensor (BEiT's mask_token)."""

    def hf_shapes(self, shape, count):
        return [(1, 1, *shape)]

    def to_ir(self, parts):
        return parts[0][0, 0]

    def to_hf(self, value, count):
        return [value[None, None]]


@register
class Beit(ViT):
    model_type = "beit"
    title = "BEiT"
    architectures = {"BeitModel": "", "BeitForImageClassification": "beit."}
    export_architecture = "BeitModel"
    classifier_architecture = "BeitForImageClassification"
    mapped = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
              "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps", "image_size", "patch_size",
              "num_channels", "use_mask_token", "use_absolute_position_embeddings", "use_relative_position_bias",
              "use_shared_relative_position_bias", "layer_scale_init_value", "use_mean_pooling")
    ignored = {"drop_path_rate": "stochastic depth (Huang et al. 2016): training only",
               "vocab_size": "the visual tokens BeitForMaskedImageModeling predicts, a head tfspec does not import",
               **dict.fromkeys(("pool_scales", "use_auxiliary_head", "auxiliary_loss_weight", "auxiliary_channels",
                                "auxiliary_num_convs", "auxiliary_concat_input", "semantic_loss_ignore_index"),
                               "BeitForSemanticSegmentation's decoder, which tfspec does not import"),
               **dict.fromkeys(("add_fpn", "reshape_hidden_states", "out_features", "out_indices", "stage_names",
                                "_out_features", "_out_indices"),
                               "the feature maps of BeitBackbone, which tfspec does not import")}
    defaults: ClassVar[dict] = ViT.defaults | {"layer_scale_init_value": 0.1, "use_mean_pooling": True}
    pooled = False  # no tanh pooler: the mean-pooling LayerNorm, or the class token (``image_pooler``)
    base_pooler: ClassVar[bool] = True
    """The base model has its pooler (BeitModel's add_pooling_layer defaults to True)."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        data = super().spec_data(source)
        mean = flag(c, "use_mean_pooling", where, True)
        data |= {"biases": {"q": True, "k": False, "v": True, "o": True, "ffn": True},
                 "positional": self._positional(c, where), "final_norm": not mean,
                 "image_pooler": {"pooling": "patch_mean", "norm": True} if mean else
                 {"pooling": "class_token", "norm": False}}
        if source.architecture == self.export_architecture and not self.base_pooler:
            del data["image_pooler"]
        gain = number(c, "layer_scale_init_value", where, float)
        if gain > 0:  # transformers: no lambda_1, lambda_2 (a gain of 1) when it is 0 or less
            data["sublayer_gain"] = gain
        data["patches"] |= {"positions": flag(c, "use_absolute_position_embeddings", where),
                            "mask_token": flag(c, "use_mask_token", where)}
        return data

    def _positional(self, c: dict, where: str) -> dict:
        own, shared = (flag(c, key, where) for key in ("use_relative_position_bias",
                                                         "use_shared_relative_position_bias"))
        if own and shared:
            raise TfspecError(f"{where}: use_relative_position_bias and use_shared_relative_position_bias are both "
                              "true: tfspec adds one relative bias per layer, a layer's own or the stack's; set one")
        if not (own or shared):
            return {"kind": "none"}
        return {"kind": "relative_bias_2d", "tables": "layer" if own else "stack"}

    def _pooling(self, architecture: str) -> dict:
        return {"pooling": "pooler"}

    def rules(self, spec, architecture: str) -> list[Rule]:
        kept = [r for r in super().rules(spec, architecture)
                if (spec.patches.positions or r.ir != "encoder.pos.weight")
                and (spec.uses_final_norm or not r.ir.startswith("encoder.norm."))]
        if spec.image_pooler is not None and spec.image_pooler.norm:
            kept += norm_rules("encoder.image_pooler_norm", "pooler.layernorm")
        if spec.patches.mask_token:
            kept.append(Rule("encoder.patch_embed.mask_token", ("embeddings.mask_token",), BatchedVector()))
        if self._table(spec) == "stack":
            kept.append(Rule("encoder.layers.0.self_attn.rel_bias_2d", (f"encoder.{TABLE}",)))
        return kept

    def _table(self, spec) -> str | None:
        """Where the relative bias tables are: ``layer``, ``stack`` or None."""
        return spec.positional.tables if spec.positional.kind == "relative_bias_2d" else None

    def _layer_rules(self, spec, ours: str, theirs: str) -> list[Rule]:
        attention = f"{theirs}attention.attention."
        rules = [r for r in super()._layer_rules(spec, ours, theirs) if not r.ir.endswith("self_attn.b_qkv")]
        rules += [Rule(f"{ours}self_attn.b_{p}", (f"{attention}{part}.bias",)) for p, part in (("q", "query"),
                                                                                              ("v", "value"))]
        if spec.sublayer_gain is not None:
            rules += [Rule(f"{ours}{sub}_gain.gain", (f"{theirs}lambda_{i}",)) for i, sub in ((1, "self_attn"),
                                                                                            (2, "ffn"))]
        if self._table(spec) == "layer":
            rules.append(Rule(f"{ours}self_attn.rel_bias_2d", (f"{attention}{TABLE}",)))
        return rules

    def rename(self, name: str) -> str:
        """transformers 5's in-memory names -> the stored ones (its BeitModel conversion mapping)."""
        name = name.replace("shared_position_bias.", "encoder.relative_position_bias.")
        name = re.sub(r"^layers\.(\d+)\.relative_position_bias\.", r"encoder.layer.\1.attention.attention."
                      "relative_position_bias.", name)
        return super().rename(name)

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        pooler, mean = spec.image_pooler, not spec.uses_final_norm
        wanted = {"pooling": "patch_mean", "norm": True} if mean else {"pooling": "class_token", "norm": False}
        has_pooler = spec.head is not None or self.base_pooler
        if (pooler is not None) != has_pooler or (pooler is not None and pooler.model_dump() != wanted):
            wants = f"image_pooler: {wanted}" if has_pooler else "no image_pooler"
            return (f"{self.title} pools the patches' mean through a LayerNorm without a final norm, or the class "
                    f"token after it: with final_norm {str(not mean).lower()}, set {wants}")
        if spec.head is not None and spec.head.pooling != "pooler":
            return f"{self.title}'s classifier reads the pooler's output: set head.pooling: pooler"
        return None

    def dropped(self, architecture: str) -> dict[str, str]:
        if architecture == self.export_architecture:
            return {"classifier.*": f"a classifier, not part of {architecture}"}
        return {}

    def outputs(self, architecture: str) -> dict[str, str]:
        if architecture != self.export_architecture:
            return {"logits": "logits"}
        return {"memory": "last_hidden_state"} | ({"pooled": "pooler_output"} if self.base_pooler else {})

    def config(self, spec) -> dict:
        config = {k: v for k, v in super().config(spec).items() if k != "qkv_bias"}
        table = self._table(spec)
        return config | {"use_absolute_position_embeddings": spec.patches.positions,
                         "use_relative_position_bias": table == "layer",
                         "use_shared_relative_position_bias": table == "stack",
                         "layer_scale_init_value": spec.sublayer_gain or 0.0,
                         "use_mean_pooling": not spec.uses_final_norm,
                         "use_mask_token": spec.patches.mask_token}

