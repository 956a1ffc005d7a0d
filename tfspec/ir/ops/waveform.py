"""The ops of a waveform encoder's front (``tfspec.spec.waveform``, wav2vec 2.0, HuBERT): the
convolutional feature encoder and the convolutional relative position embedding.

Their rows of ``tfspec report`` (Table 1's measures for what is not a layer kind), for n encoder
positions: the feature encoder's products are sum_i 2 L_i c_i c_{i-1} k_i over its convolutions,
L_i the frames of layer i for the fewest samples that give n (L_last = n,
L_{i-1} = (L_i - 1) stride_i + k_i), so O(n) in the positions (and in the samples: about 320
per position for wav2vec 2.0) with O(1) sequential operations; the position convolution's are
2 n d (d / groups) K, O(n d^2 K / groups), and a position's output reads the K neighbouring
frames. Attention over the positions then costs Table 1's O(n^2 d).
"""

from __future__ import annotations

from . import Op, register


def layer_frames(node, n):
    """The frames L_i of each convolution of the feature encoder, first to last, when it gives ``n``."""
    out = [n]
    for k, stride in zip(reversed(node.attrs["kernels"][1:]), reversed(node.attrs["strides"][1:])):
        out.append((out[-1] - 1) * stride + k)
    return out[::-1]


@register
class FeatureEncoder(Op):
    """input_values (B, samples) -> (B, S, c_last): per layer act(norm(conv_{k_i, stride_i}(x))), the
    norm a GroupNorm per channel (``group``, first layer only) or a LayerNorm over the channels
    (``layer``, every layer); the time axis of the last becomes the sequence. Mixes neighbouring
    samples: not position-wise."""
    name = "feature_encoder"

    @staticmethod
    def flops(node, s, dense=False):
        a = node.attrs
        inputs = [1, *a["channels"][:-1]]
        return {f"conv_{i}": 2 * frames * c * before * k for i, (frames, c, before, k)
                in enumerate(zip(layer_frames(node, s.n), a["channels"], inputs, a["kernels"]))}

    @staticmethod
    def saved(graph, node, sizes, out):
        """The samples (the first weight's gradient) and each convolution's output before and
        after its norm and activation (3 per layer with a norm, 2 without); 4 bytes each."""
        a, batch = node.attrs, sizes["B"]
        frames = layer_frames(node, sizes["S"])
        saved = {f"{node.name}#samples": 4 * batch * ((frames[0] - 1) * a["strides"][0] + a["kernels"][0])}
        for i, (length, c) in enumerate(zip(frames, a["channels"])):
            normed = a["norm"] == "layer" or i == 0
            saved[f"{node.name}#conv_{i}"] = 4 * batch * length * c * (3 if normed else 2)
        return saved


@register
class ConvPositions(Op):
    """x (B, S, d), padded frames zeroed -> x + act(conv(x)): a grouped convolution over time of
    ``kernel_size`` frames whose weight is g v / ||v|| (weight normalisation over each kernel tap,
    as stored), zero-padded by kernel // 2 and trimmed to S (the last output dropped for an even
    kernel). Mixes the K neighbouring frames: not position-wise."""
    name = "conv_positions"

    @staticmethod
    def flops(node, s, dense=False):
        a = node.attrs
        return {"position_conv": 2 * s.n * s.d * (s.d / a["groups"]) * a["kernel_size"]}

    @staticmethod
    def saved(graph, node, sizes, out):
        """The masked input (the weight's gradient) and the convolution's output before GELU."""
        return {f"{node.name}#input": out(node.name), f"{node.name}#conv": out(node.name)}
