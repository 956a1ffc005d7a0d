"""1-D convolution over positions: Table 1's convolutional row and §4's separable variant.

Contiguous kernels keep the length ("same" padding) or, when causal, pad on the left only.
A depthwise-separable convolution (a k-wide depthwise filter, then a 1x1 pointwise
projection) costs O(k*n*d + n*d^2) instead of O(k*n*d^2).

A layer connects positions within its kernel's reach only: stacked, contiguous kernels need
O(n/k) layers to connect all positions, dilated ones O(log_k(n)) when the dilation grows
geometrically with depth (``at_depth``, as in ByteNet and WaveNet).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from tfspec.spec.bounds import Dilation, Kernel

from tfspec.layers.base import Sublayer, register
from tfspec.layers.ffn import Activation


@register
class Convolution(Sublayer):
    """Conv1d(d_model -> d_model, kernel k, dilation) followed by the activation."""

    kind: Literal["conv"] = "conv"
    stem: ClassVar[str] = "conv"
    component: ClassVar[str] = "conv"
    kernel: Kernel
    """Kernel width k."""
    dilation: Dilation = 1
    """Gap between kernel taps; dilations growing k^l give O(log_k n) path length."""
    separable: bool = False
    """Depthwise (k taps per channel) then pointwise (d x d) instead of a dense kernel."""
    causal: bool = False
    """Pad on the left only, so position i reads positions <= i; required in a decoder."""
    activation: Activation | None = None
    """Applied after the convolution; defaults to the spec's activation."""
    symbols: ClassVar[dict[str, str]] = {"k": "kernel"}

    @property
    def looks_ahead(self) -> bool:
        return not self.causal and self.kernel > 1

    def padding(self) -> tuple[int, int]:
        """Zeros added (left, right) so the output keeps the input length."""
        total = (self.kernel - 1) * self.dilation
        return (total, 0) if self.causal else (total // 2, total - total // 2)

    def flops(self, s, dense=False):
        # One output per position ("same" or causal padding), k taps of d channels each.
        if self.separable:
            return {"depthwise": 2 * s.n * s.k * s.d, "pointwise": 2 * s.n * s.d * s.d}
        return {"conv": 2 * s.n * s.k * s.d * s.d}

    def reads(self, q, k):
        left, right = self.padding()
        offset = k - q + left  # tap t reads position q - left + t * dilation
        return (offset >= 0) & (k - q <= right) & (offset % self.dilation == 0)

    def at_depth(self, depth):
        """A dilated stack (dilation > 1; the spec's value is its single layer's) uses dilation
        rate^l at layer l, with the largest rate whose taps still tile the reach below without
        gaps: k for a causal kernel (reach k^L - 1 after L layers: Table 1's O(log_k(n))),
        1 + (k - 1) // 2 for a centred one."""
        if self.dilation == 1:
            return self
        left = self.kernel - 1 if self.causal else (self.kernel - 1) // 2
        right = self.kernel - 1 - left
        rate = 1 + (min(left, right) if left and right else max(left, right))
        return self.model_copy(update={"dilation": rate ** depth})

    def lower(self, b, name, x):
        d, bias = b.spec.d_model, b.spec.bias
        if self.separable:
            params = {"w_depthwise": ((d, 1, self.kernel), "xavier_uniform"),
                      "w_pointwise": ((d, d, 1), "xavier_uniform")}
            if bias:
                params |= {"b_depthwise": ((d,), "zeros"), "b_pointwise": ((d,), "zeros")}
        else:
            params = {"w_conv": ((d, d, self.kernel), "xavier_uniform")}
            if bias:
                params["b_conv"] = ((d,), "zeros")
        attrs = {"kernel": self.kernel, "dilation": self.dilation, "separable": self.separable,
                 "padding": list(self.padding()), "activation": self.activation or b.spec.activation}
        return b.op(name, "conv", [x], attrs=attrs, params=params, layer=self)
