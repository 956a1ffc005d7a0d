"""The op of a spectrogram's subsampler (``tfspec.spec.subsampler``, Speech2Text's Conv1dSubsampler):
convolutions of stride 2 over time, each followed by a GLU.

Its row of ``tfspec report`` (Table 1's measures for what is not a layer kind), for n encoder
positions, L convolutions, convolution i (from 1) reading c_i channels into o_i over k_i frames
and giving F_i = 2^(L - i) n frames: 2 F_i o_i c_i k_i products each (fairseq S2T, L = 2:
2 (2n) C m k_1 + 2 n (2d) (C / 2) k_2 for m mels, C channels), O(n (m C + C d) k) and linear in
the audio's length, with O(1) sequential operations (each convolution computes every frame at
once) and no path between positions through it longer than its receptive field; the GLUs' gates
and the sqrt(d) scale are elementwise (no products).
"""

from __future__ import annotations

from . import Op, register


def layers(node, d_model: int) -> list[tuple[int, int, int, int]]:
    """(input channels, output channels, kernel, frames per encoder position) of each convolution."""
    a = node.attrs
    kernels, count = a["kernel_sizes"], len(a["kernel_sizes"])
    outs = [a["channels"]] * (count - 1) + [2 * d_model]
    ins = [a["mels"]] + [a["channels"] // 2] * (count - 1)
    return [(c, o, k, 2 ** (count - 1 - i)) for i, (c, o, k) in enumerate(zip(ins, outs, kernels))]


@register
class ConvSubsampler(Op):
    """input_features (B, F, mels) -> (B, S, d): L times GLU(conv_k,stride 2(x)), each zero-padded by
    k // 2, then x scale (S = ceil(F / 2^L)). Mixes neighbouring frames: not position-wise."""
    name = "conv_subsampler"

    @staticmethod
    def flops(node, s, dense=False):
        convs = layers(node, node.shape[-1])
        return {f"conv_{i}": 2 * per * s.n * (2 * s.d if i == len(convs) else o) * c * k
                for i, (c, o, k, per) in enumerate(convs, 1)}

    @staticmethod
    def saved(graph, node, sizes, out):
        """The features (w_1's gradient), each convolution's output before its GLU (the GLU's
        gradient) and each inner GLU's output (the next weight's gradient); 4 bytes each."""
        b, s, mels = sizes["B"], sizes["S"], node.attrs["mels"]
        convs = layers(node, node.shape[-1])
        kept = {f"{node.name}#features": 4 * b * mels * convs[0][3] * 2 * s}
        for i, (_, o, _, per) in enumerate(convs, 1):
            kept[f"{node.name}#conv_{i}"] = 4 * b * o * per * s
            if i < len(convs):
                kept[f"{node.name}#glu_{i}"] = 4 * b * (o // 2) * per * s
        return kept
