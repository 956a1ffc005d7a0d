"""The ops of a spectrogram encoder's front (``tfspec.spec.audio``, Whisper): the convolution stem
and the stored position table.

Their rows of ``tfspec report`` (Table 1's measures for what is not a layer kind), for n encoder
positions, F = stride n frames, k the kernel and m the mels: the stem's products are
2 F d m k + 2 n d^2 k, O(n d (m + d) k), linear in the audio's length, with O(1) sequential
operations (each convolution computes every frame at once) and a receptive field of
2k - 1 + (k - 1)(stride - 1) frames per position (Whisper: 7 frames, 70 ms), so no path between
two positions runs through the stem; the table is an add (no products). Attention over the
1500 positions then costs Table 1's O(n^2 d).
"""

from __future__ import annotations

from . import Op, keeps_nothing, no_products, register


def stem_frames(node, sizes: dict) -> int:
    """Frames F the stem reads for the sizes' S positions (stride S, the most that give S)."""
    return node.attrs["stride"] * sizes["S"]


@register
class ConvStem(Op):
    """input_features (B, mels, F) -> (B, S, d): GELU(conv_k(x) + b_1) -> GELU(conv_k,stride(.) + b_2),
    both zero-padded by k // 2, the output's time axis as the sequence (S = ceil(F / stride)).
    Mixes neighbouring frames: not position-wise."""
    name = "conv_stem"

    @staticmethod
    def flops(node, s, dense=False):
        a = node.attrs
        frames = a["stride"] * s.n
        return {"conv_1": 2 * frames * s.d * a["mels"] * a["kernel_size"],
                "conv_2": 2 * s.n * s.d * s.d * a["kernel_size"]}

    @staticmethod
    def saved(graph, node, sizes, out):
        """The features (w_1's gradient), the first convolution's output before and after GELU
        (GELU's and w_2's gradients), the second's before GELU; 4 bytes each."""
        frames, b, d = stem_frames(node, sizes), sizes["B"], node.shape[-1]
        return {f"{node.name}#features": 4 * b * node.attrs["mels"] * frames,
                f"{node.name}#conv_1": 4 * 2 * b * d * frames, f"{node.name}#conv_2": 4 * b * d * sizes["S"]}


@register
class TablePositions(Op):
    """x + E[:S]: row i of the stored (rows, d) table added at position i (Whisper's
    ``embed_positions``, sinusoids kept as a parameter); position-wise, no products."""
    name, position_wise = "table_positions", True
    flops, saved = staticmethod(no_products), staticmethod(keeps_nothing)
