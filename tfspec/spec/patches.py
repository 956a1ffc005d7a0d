"""Image patches as the encoder's input: pixel values (batch, channels, height, width) floats cut
into p x p patches, each a token (Dosovitskiy et al. 2021, ViT §3.1, eq. 1).

What an image encoder is made of, each an IR op of its own (``tfspec/ir/ops/patches.py``):

- the patch embedding: a linear map of each flattened p x p x C patch to d_model, computed as a
  convolution of stride p (x_p E of eq. 1); the patches run in raster order, N = (H/p)(W/p);
- learned tokens put before the patches: the class token (x_class of eq. 1, read by the
  classifier) and DeiT's distillation token (Touvron et al. 2021, §4), each with a position;
- learned absolute positions E_pos (eq. 1), one row per prefix token and one per patch of the
  grid the table was trained at; an image of another size gets the patch rows resized to its grid
  by bicubic interpolation (ViT §3.2, "Fine-tuning and higher resolution": transformers'
  ``interpolate_pos_encoding``), the prefix rows as they are;
- register tokens (Darcet et al. 2024, "Vision Transformers Need Registers"): learned tokens
  after the class token, added once the positions are, so they have none.

A spec with ``patches`` is an encoder (``family: encoder-only``, ``positional: {kind: none}``:
the positions are the patches' own, or BEiT's ``relative_bias_2d`` over the patch grid); its head reads the class token or the patches' mean
(``tfspec.spec.image_heads``), or, without a head, the encoder's output is the model's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from tfspec.spec.base import SpecModel
from tfspec.spec.bounds import MAX_POSITIONS, Channels, Positions

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec

MAX_REGISTERS = 1024
"""Register tokens: DINOv2 with registers uses 4, the paper at most 16."""


class Patches(SpecModel):
    """The encoder reads ``pixel_values`` (batch, channels, height, width) floats: square images of
    ``image_size`` pixels at training, any size of at least one patch at inference."""

    image_size: Positions
    """Height and width in pixels of the images the position table was trained at (ViT-B/16: 224)."""
    patch_size: Annotated[int, Field(ge=1, le=MAX_POSITIONS)]
    """Side p of the square patches, the convolution's kernel and stride (ViT-B/16: 16, DINOv2: 14)."""
    channels: Channels = 3
    """Values per pixel (3: RGB)."""
    class_token: bool = True
    """A learned class token before the patches (ViT's x_class), with a position of its own."""
    distillation_token: bool = False
    """DeiT's learned distillation token after the class token, with a position of its own."""
    registers: Annotated[int, Field(ge=0, le=MAX_REGISTERS)] = 0
    """Learned register tokens after the class token, without positions (DINOv2 with registers: 4)."""
    bias: bool = True
    """The patch embedding's bias (CLIP's convolution has none)."""
    positions: bool = True
    """The learned absolute positions E_pos (eq. 1); False: none, the positions entering through
    attention instead (BEiT's ``relative_bias_2d``, its use_absolute_position_embeddings off)."""
    mask_token: bool = False
    """A learned vector masked image modelling puts in place of masked patches (DINOv2's
    use_mask_token, on in its checkpoints): held, counted and exported with the weights; no
    inference graph reads it (they take no mask of patches)."""

    @property
    def grid(self) -> int:
        """Patches per side of a training image: image_size // patch_size (the conv floors)."""
        return self.image_size // self.patch_size

    @property
    def positioned(self) -> int:
        """Tokens before the patches that have a position row: the class and distillation tokens."""
        return int(self.class_token) + int(self.distillation_token)

    @property
    def prefix(self) -> int:
        """Tokens before the first patch in the encoder's sequence (registers included)."""
        return self.positioned + self.registers

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when the rest of ``spec`` cannot read patches."""
        if spec.family != "encoder-only":
            return "family", f"patches feed an encoder alone: set family encoder-only (got {spec.family})"
        if spec.image is not None or spec.frames is not None or spec.segments:
            return "patches", "patches replace token inputs: remove image, frames and segments"
        over_patches = spec.positional.definition.over_patches
        if spec.positional.kind != "none" and not over_patches:
            return "positional", ("patches carry their own learned positions (interpolated to other image "
                                  f"sizes): set positional: {{kind: none}} (got {spec.positional.kind})")
        if over_patches and self.prefix != 1:
            return "positional", (f"{spec.positional.kind} has entries for one class token before the patches: "
                                  "set patches.class_token, no distillation_token or registers")
        if self.patch_size > self.image_size:
            return "patches.patch_size", (f"patch_size ({self.patch_size}) exceeds image_size "
                                          f"({self.image_size}): an image holds no whole patch")
        if self.distillation_token and not self.class_token:
            return "patches.distillation_token", "DeiT's distillation token follows the class token: set class_token"
        if self.registers and not self.class_token:
            return "patches.registers", "registers follow the class token: set class_token"
        if spec.pooler and not self.class_token:
            return "pooler", "the pooler reads the class token: set patches.class_token"
        return None

    def lower(self, b: LayerBuilder) -> str:
        """pixel_values -> patch embeddings -> [class, distillation] + patches -> + positions (unless
        ``positions`` is off) -> registers after the class token: the (B, S, d_model) sequence, S = prefix + N."""
        d, c, p, stack = b.spec.d_model, self.channels, self.patch_size, b.stack
        pixels = b.op("pixel_values", "input", [], attrs={"dtype": "float32", "pixels": True, "channels": c},
                      shape=("B", c, self.image_size, self.image_size))
        b.graph.ports["pixel_values"] = pixels
        x = b.op(f"{stack}.patch_embed", "patch_embedding", [pixels], component="embedding",
                 attrs={"patch_size": p, "channels": c, "prefix": self.prefix},
                 params={"weight": ((d, c, p, p), "xavier_uniform")}
                 | ({"bias": ((d,), "zeros")} if self.bias else {})
                 | ({"mask_token": ((d,), "zeros")} if self.mask_token else {}))
        if self.positioned:
            x = b.op(f"{stack}.tokens", "learned_tokens", [x], component="embedding",
                     attrs={"at": 0, "count": self.positioned},
                     params={"tokens": ((self.positioned, d), "normal:0.02")})
        if self.positions:
            x = b.op(f"{stack}.pos", "patch_positions", [x, pixels], component="positional",
                     attrs={"grid": self.grid, "prefix": self.positioned, "patch_size": p},
                     params={"weight": ((self.positioned + self.grid ** 2, d), "normal:0.02")})
        if self.registers:
            x = b.op(f"{stack}.registers", "learned_tokens", [x], component="embedding",
                     attrs={"at": self.positioned, "count": self.registers},
                     params={"tokens": ((self.registers, d), "normal:0.02")})
        return x
