"""The ops of image encoders (``tfspec.spec.patches``, ViT, DeiT, DINOv2): patches in, learned
tokens and positions, the per-channel gain on sub-layer outputs, and the heads' pooling.

Their rows of ``tfspec report`` (Table 1's measures for what is not a layer kind): the patch
embedding's products are 2 N d C p^2 for N = n - prefix patches, O(n d) in the sequence and so
linear in the pixels (N p^2 = H W of them: 2 H W C d); every other op here is a gather, a concat
or elementwise (no products, 0). Attention over the sequence then costs Table 1's O(n^2 d) with
n = prefix + H W / p^2: quadratic in the patches, the reason for ViT's patch size.
"""

from __future__ import annotations

from . import Op, keeps_inputs, keeps_inputs_and_output, keeps_nothing, no_products, register


@register
class PatchEmbedding(Op):
    """pixel_values (B, C, H, W) -> (B, N, d): each p x p x C patch times a (C p^2, d) matrix plus
    a bias (ViT eq. 1's x_p E), as a convolution of kernel and stride p; position-wise in the
    patches (each reads its own pixels, and no image is padded)."""
    name, position_wise = "patch_embedding", True
    saved = staticmethod(keeps_inputs)

    @staticmethod
    def flops(node, s, dense=False):
        p, c = node.attrs["patch_size"], node.attrs["channels"]
        return {"patches": 2 * (s.n - node.attrs["prefix"]) * s.d * c * p * p}


@register
class LearnedTokens(Op):
    """``count`` learned vectors put into every sequence at index ``at`` (ViT's class token, DeiT's
    distillation token, DINOv2's registers): a concat, no products."""
    name = "learned_tokens"
    flops, saved = staticmethod(no_products), staticmethod(keeps_nothing)


@register
class PatchPositions(Op):
    """The learned table E_pos added (ViT eq. 1): ``prefix`` rows for the tokens before the
    patches, then a ``grid`` x ``grid`` table resized bicubically to the image's patch grid (read
    from the pixels' shape, its second input) when the image is of another size."""
    name, position_wise = "patch_positions", True
    flops, saved = staticmethod(no_products), staticmethod(keeps_nothing)


@register
class ChannelGain(Op):
    """x * gamma, a learned gain per feature (CaiT's and DINOv2's LayerScale on each sub-layer's
    output): elementwise; its backward keeps the input (for gamma's gradient)."""
    name, position_wise = "channel_gain", True
    flops, saved = staticmethod(no_products), staticmethod(keeps_inputs_and_output)


@register
class TokenPool(Op):
    """One vector per image from the encoder's output (B, S, d): the features of each of ``reads``
    side by side, (B, len(reads) d): ``class`` (position 0), ``distillation`` (position 1),
    ``patch_mean`` (the mean over the positions from ``prefix`` on: the patches alone)."""
    name = "token_pool"
    flops, saved = staticmethod(no_products), staticmethod(keeps_inputs_and_output)


@register
class Average(Op):
    """The mean of its inputs (DeiT's class and distillation logits at inference)."""
    name = "average"
    flops, saved = staticmethod(no_products), staticmethod(keeps_nothing)
