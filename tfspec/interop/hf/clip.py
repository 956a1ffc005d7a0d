"""CLIP (``model_type: clip``): transformers' CLIPModel as one tfspec spec with a ``dual`` section
(``tfspec.spec.dual``; Radford et al. 2021, "Learning Transferable Visual Models From Natural
Language Supervision").

The spec is the text tower: token embeddings and learned positions (unscaled), pre-norm causal
self-attention layers with quick_gelu MLPs, the final LayerNorm, pooled at the end-of-text
token (the first position holding eos_token_id, or, where a configuration keeps the old
eos_token_id 2, the position of the largest id, as CLIPTextTransformer does). ``dual.vision`` is
the image tower: a ViT (``vit.py``'s patches) whose convolution has no bias, a class token
stored as a vector, CLIP's ``pre_layrnorm`` on the embeddings (``embed_norm``), and the
``post_layernorm`` of the class token (the final norm, then the class token: the norm is per
position). Both are projected without bias into projection_dim features; the scores are
exp(logit_scale) times the cosines. SigLIP subclasses it (``siglip.py``). Text is padded on the
right, as CLIP's tokenizer pads (positions count from each row's first token, which is the
first position there). Defaults are CLIPConfig's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import (ACTIVATION_NAMES, ACTIVATIONS, Family, Rule, Source, _show, check_config,
                                      norm_rules, number, register, repeated_layer)
from tfspec.interop.hf.layouts import Concat, Layout
from tfspec.interop.hf.vit import VOCAB, square

TOWER_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "hidden_act",
                "layer_norm_eps", "attention_dropout")
TOWER_IGNORED = {"initializer_range": "initialisation of untrained weights",
                 "initializer_factor": "initialisation of untrained weights",
                 "projection_dim": "the projection of the single-tower *WithProjection classes; CLIPModel's is "
                                   "the top level's projection_dim"}


@dataclass(frozen=True)
class Vector(Layout):
    """The IR's one-row (1, d) matrix stored as a (d,) vector (CLIP's class_embedding)."""

    def hf_shapes(self, shape, count):
        return [tuple(shape[1:])]

    def to_ir(self, parts):
        return parts[0][None]

    def to_hf(self, value, count):
        return [value[0]]


class Tower(Family):
    """A nested configuration (text_config, vision_config), checked as a family of its own."""

    family = "encoder-only"

    def __init__(self, model_type: str, title: str, mapped: tuple[str, ...], ignored: dict[str, str]):
        self.model_type, self.title, self.mapped, self.ignored = model_type, title, mapped, ignored


@register
class CLIP(Family):
    model_type = "clip"
    family = "encoder-only"
    title = "CLIP"
    architectures = {"CLIPModel": ""}
    export_architecture = "CLIPModel"
    mapped = ("text_config", "vision_config", "projection_dim", "logit_scale_init_value")
    ignored = {"initializer_factor": "initialisation of untrained weights"}
    text_fields = TOWER_FIELDS + ("vocab_size", "max_position_embeddings", "pad_token_id", "bos_token_id",
                                  "eos_token_id")
    vision_fields = TOWER_FIELDS + ("image_size", "patch_size", "num_channels")
    text_defaults: ClassVar[dict] = {"vocab_size": 49408, "hidden_size": 512, "intermediate_size": 2048,
                                     "num_hidden_layers": 12, "num_attention_heads": 8, "max_position_embeddings": 77,
                                     "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5, "pad_token_id": 1,
                                     "bos_token_id": 49406, "eos_token_id": 49407}
    vision_defaults: ClassVar[dict] = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                                       "num_attention_heads": 12, "image_size": 224, "patch_size": 32,
                                       "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5}
    causal = True
    """CLIP's text tower is causal; SigLIP's reads both ways."""

    def check(self, config: dict, where: str) -> dict[str, str]:
        """The top level's fields, then each tower's as a file of its own."""
        ignored = check_config(self, config, where)
        for side, fields in (("text", self.text_fields), ("vision", self.vision_fields)):
            nested = self._nested(config, side, where)
            tower = Tower(f"{self.model_type}_{side}_model", f"{self.title} {side} tower", fields,
                          self._tower_ignored(side))
            found = check_config(tower, nested, f"{where} ({side}_config)")
            ignored |= {f"{side}_config.{k}": why for k, why in found.items()}
        return ignored

    def _tower_ignored(self, side: str) -> dict[str, str]:
        return TOWER_IGNORED

    def _nested(self, config: dict, side: str, where: str) -> dict:
        nested = config.get(f"{side}_config") or {}
        if not isinstance(nested, dict):
            raise TfspecError(f"{where}: {side}_config: {_show(nested)} is not a configuration")
        return nested

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        text = self.text_defaults | self._nested(c, "text", where)
        vision = self.vision_defaults | self._nested(c, "vision", where)
        width = self._width(c, text, where)
        return self._text(text, f"{where} (text_config)", width) | {"dual": self._dual(c, vision, where, width)}

    def _tower(self, c: dict, where: str) -> dict:
        d = number(c, "hidden_size", where)
        return {"family": "encoder-only", "d_model": d, "heads": number(c, "num_attention_heads", where),
                "d_ff": number(c, "intermediate_size", where), "activation": self._activation(c, where),
                "dropout": 0.0, "attention_dropout": number(c, "attention_dropout", where, float, 0.0),
                "label_smoothing": 0.0, "norm": "pre", "final_norm": True,
                "norm_eps": number(c, "layer_norm_eps", where, float)}

    def _activation(self, c: dict, where: str) -> str:
        name = c.get("hidden_act")
        if name == "quick_gelu" or name in ACTIVATIONS:
            return "quick_gelu" if name == "quick_gelu" else ACTIVATIONS[name]
        raise TfspecError(f"{where}: hidden_act: {_show(name)} is not supported; tfspec computes quick_gelu, "
                          f"{', '.join(sorted(ACTIVATIONS))}")

    def _text(self, c: dict, where: str, width: int | None) -> dict:
        """The text tower ending in its embedding head (``width`` None: the pooled vector itself)."""
        ids = {key: number(c, f"{key}_token_id", where) for key in ("pad", "bos", "eos")}
        block = ["causal_self_attention" if self.causal else "self_attention", "ffn"]
        return self._tower(c, where) | {
            "vocab": self._vocab({"size": number(c, "vocab_size", where), **{f"{k}_id": v for k, v in ids.items()}}),
            "positional": {"kind": "learned", "max_len": number(c, "max_position_embeddings", where)},
            "embed_scale": False, "encoder": {"layers": number(c, "num_hidden_layers", where), "block": block},
            "head": self._text_head(c, width, where)}

    def _vocab(self, vocab: dict) -> dict:
        return vocab

    def _text_head(self, text: dict, width: int | None, where: str) -> dict:
        """The end-of-text position (the largest id where eos_token_id is the old 2), projected."""
        pooling = "highest_id" if number(text, "eos_token_id", where) == 2 else "eos_token"
        return self._head(pooling, width, number(text, "hidden_size", where), "linear")

    def _head(self, pooling: str, width: int | None, d: int, projection: str) -> dict:
        return {"kind": "embedding", "pooling": pooling} | (
            {"width": d, "projection": "none"} if width is None else {"width": width, "projection": projection})

    def _vision(self, c: dict, where: str, width: int | None) -> dict:
        """The image tower ending in its embedding head: the class token through post_layernorm."""
        size, patch = square(c, "image_size", where, 224), square(c, "patch_size", where, 32)
        if not 1 <= patch <= size:
            raise TfspecError(f"{where}: patch_size ({patch}) must be 1 .. image_size ({size})")
        return self._tower(c, where) | {
            "vocab": VOCAB, "positional": {"kind": "none"}, "embed_norm": True, "final_norm": False,
            "patches": {"image_size": size, "patch_size": patch, "bias": False,
                        "channels": number(c, "num_channels", where, default=3)},
            "encoder": {"layers": number(c, "num_hidden_layers", where), "block": ["self_attention", "ffn"]},
            "head": self._head("class_token", width, number(c, "hidden_size", where), "linear") | {"norm": True}}

    def _width(self, c: dict, text: dict, where: str) -> int:
        return number(c, "projection_dim", where, default=512)

    def _dual(self, c: dict, vision: dict, where: str, width: int) -> dict:
        return {"vision": self._vision(vision, f"{where} (vision_config)", width),
                "logit_scale": number(c, "logit_scale_init_value", where, float, 2.6592)}

    def rules(self, spec, architecture: str) -> list[Rule]:
        return self._text_rules(spec) + self._vision_rules(spec.dual.vision, "vision.") + [
            Rule("dual.logits_per_text.scale", ("logit_scale",))]

    def _text_rules(self, spec, theirs: str = "text_model.") -> list[Rule]:
        """The text tower's rules, its tensors under ``theirs`` (CLIPModel's ``text_model.``)."""
        rules = [Rule("encoder.embed.weight", (f"{theirs}embeddings.token_embedding.weight",)),
                 Rule("encoder.pos.weight", (f"{theirs}embeddings.position_embedding.weight",)),
                 *norm_rules("encoder.norm", f"{theirs}final_layer_norm")]
        rules += [r for i in range(spec.encoder.num_layers)
                  for r in self._layer_rules(f"encoder.layers.{i}.", f"{theirs}encoder.layers.{i}.")]
        return rules + self._text_head_rules(spec)

    def _text_head_rules(self, spec) -> list[Rule]:
        return [Rule("head.projection.weight", ("text_projection.weight",))] if spec.head.projection != "none" else []

    def _vision_rules(self, v, ours: str, theirs: str = "vision_model.") -> list[Rule]:
        """The image tower ``v``'s rules, its IR names under ``ours`` (``vision.`` in a dual encoder), its
        tensors under ``theirs``."""
        rules = [Rule(f"{ours}encoder.patch_embed.weight", (f"{theirs}embeddings.patch_embedding.weight",)),
                 Rule(f"{ours}encoder.pos.weight", (f"{theirs}embeddings.position_embedding.weight",))]
        rules += [r for i in range(v.encoder.num_layers)
                  for r in self._layer_rules(f"{ours}encoder.layers.{i}.", f"{theirs}encoder.layers.{i}.")]
        return rules + self._vision_head_rules(v, ours, theirs)

    def _layer_rules(self, ours: str, theirs: str) -> list[Rule]:
        qkv = [f"{theirs}self_attn.{part}_proj" for part in "qkv"]
        return [Rule(ours + "self_attn.w_qkv", tuple(f"{p}.weight" for p in qkv), Concat()),
                Rule(ours + "self_attn.b_qkv", tuple(f"{p}.bias" for p in qkv), Concat()),
                Rule(ours + "self_attn.w_o", (f"{theirs}self_attn.out_proj.weight",)),
                Rule(ours + "self_attn.b_o", (f"{theirs}self_attn.out_proj.bias",)),
                *norm_rules(ours + "self_attn_norm", theirs + "layer_norm1"),
                *norm_rules(ours + "ffn_norm", theirs + "layer_norm2"),
                *[Rule(f"{ours}ffn.{w}_{n}", (f"{theirs}mlp.fc{n}.{t}",)) for n in "12"
                  for w, t in (("w", "weight"), ("b", "bias"))]]

    def _vision_head_rules(self, v, ours: str, theirs: str) -> list[Rule]:
        """The class token, pre_layrnorm, the post_layernorm of the class token and the projection."""
        rules = [Rule(f"{ours}encoder.tokens.tokens", (f"{theirs}embeddings.class_embedding",), Vector()),
                 *norm_rules(f"{ours}encoder.embed_norm", f"{theirs}pre_layrnorm"),
                 *norm_rules(f"{ours}head.norm", f"{theirs}post_layernorm")]
        if v.head.projection != "none":
            rules.append(Rule(f"{ours}head.projection.weight", ("visual_projection.weight",)))
        return rules

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if spec.dual is None:
            return f"{self.title} is a dual encoder: give the spec a dual section"
        return None

    def config(self, spec) -> dict:
        """text_config, vision_config and the joint fields: ``spec_data`` read backwards."""
        return {"architectures": [self.export_architecture], "model_type": self.model_type, **self._joint_config(spec),
                "text_config": self._text_config(spec), "vision_config": self._vision_config(spec.dual.vision)}

    def _text_config(self, spec) -> dict:
        vocab = spec.vocab
        return self._tower_config(spec) | {"vocab_size": vocab.size, "max_position_embeddings": spec.positional.max_len,
                                           "pad_token_id": vocab.pad_id, "bos_token_id": vocab.bos_id,
                                           "eos_token_id": vocab.eos_id}

    def _vision_config(self, v) -> dict:
        return self._tower_config(v) | {"image_size": v.patches.image_size, "patch_size": v.patches.patch_size,
                                        "num_channels": v.patches.channels}

    def _tower_config(self, tower) -> dict:
        attention, ffn = repeated_layer(tower, "encoder")
        return {"hidden_size": tower.d_model, "num_hidden_layers": tower.encoder.num_layers,
                "num_attention_heads": attention.heads, "intermediate_size": ffn.d_ff,
                "hidden_act": ACTIVATION_NAMES.get(ffn.activation, ffn.activation), "layer_norm_eps": tower.norm_eps,
                "attention_dropout": tower.attention_dropout}

    def _joint_config(self, spec) -> dict:
        return {"projection_dim": spec.head.width, "logit_scale_init_value": spec.dual.logit_scale}

    def outputs(self, architecture: str) -> dict[str, str]:
        return {port: port for port in ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds")}


class OneTower(CLIP):
    """One tower of CLIP alone (``clip_text.py``, ``clip_vision.py``): an encoder-only spec ending in
    an ``embedding`` head, its own configuration the tower's (``text_config`` or ``vision_config``
    of CLIPModel's). The subclass names its ``side``, its two classes and its projection; with the
    projection the embedding is ``<side>_embeds`` (not normalised), without it ``pooler_output``."""

    side: ClassVar[str]
    """"text" or "vision": which of CLIP's readers and writers the tower is."""
    bare: ClassVar[str]
    """The class without a projection (CLIPTextModel); ``export_architecture`` is the one with."""
    embeds: ClassVar[str]
    """The projected embedding's output name."""

    def check(self, config: dict, where: str) -> dict[str, str]:
        return check_config(self, config, where)

    def spec_data(self, source: Source) -> dict:
        c, where = getattr(self, f"{self.side}_defaults") | source.config, source.where
        width = number(c, "projection_dim", where, default=512)  # read (its type checked) whether or not it is used
        return getattr(self, f"_{self.side}")(c, where, width if source.architecture != self.bare else None)

    def rules(self, spec, architecture: str) -> list[Rule]:
        return self._text_rules(spec, "") if self.side == "text" else self._vision_rules(spec, "", "")

    def structure(self, spec) -> str | None:
        if reason := Family.structure(self, spec):
            return reason
        if spec.dual is not None or (spec.patches is None) == (self.side == "vision"):
            return (f"{self.title} reads image patches alone: give the spec patches and no dual"
                    if self.side == "vision" else f"{self.title} reads token ids alone: drop dual and patches")
        if spec.head is None or spec.head.kind != "embedding":
            return f"{self.title} ends in an embedding head"
        return None

    def architecture_for(self, spec) -> str:
        return self.bare if spec.head.projection == "none" else self.export_architecture

    def config(self, spec) -> dict:
        projected = spec.head.projection != "none"
        tower = getattr(self, f"_{self.side}_config")(spec)
        return {"architectures": [self.architecture_for(spec)], "model_type": self.model_type, **tower,
                **({"projection_dim": spec.head.width} if projected else {})}

    def outputs(self, architecture: str) -> dict[str, str]:
        return {"memory": "last_hidden_state", "logits": self.embeds if architecture != self.bare else "pooler_output"}
