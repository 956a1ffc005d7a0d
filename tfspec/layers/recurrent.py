"""Recurrent layers (RNN, LSTM, GRU) as residual sub-layers: Table 1's recurrent row.

Parameter names and gate layouts follow cuDNN/PyTorch (weight_ih_l0, weight_hh_l0, ...),
which ONNX's LSTM/GRU/RNN ops also take after a gate reordering.

Each step multiplies the input and the previous hidden state by the gate matrices: O(n*d^2)
work, but step i waits for step i - 1, so n sequential operations and paths n steps long.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from tfspec.layers.base import Sublayer, register

GATES = {"rnn": 1, "gru": 3, "lstm": 4}


@register
class Recurrent(Sublayer):
    """A one-layer recurrent network over the sequence; bidirectional halves the hidden size."""

    kind: Literal["recurrent"] = "recurrent"
    stem: ClassVar[str] = "rnn"
    component: ClassVar[str] = "recurrent"
    cell: Literal["lstm", "gru", "rnn"] = "lstm"
    """Recurrent cell: LSTM, GRU, or an Elman RNN with tanh."""
    bidirectional: bool = False
    """Read the sequence both ways; each direction gets d_model / 2 units. Not in a decoder."""

    @property
    def looks_ahead(self) -> bool:
        return self.bidirectional

    @property
    def recurrence(self) -> str:
        return "both" if self.bidirectional else "forward"

    def flops(self, s, dense=False):
        directions, hidden = (2, s.d / 2) if self.bidirectional else (1, s.d)
        rows = directions * GATES[self.cell] * hidden  # gate pre-activations per position
        return {"input": 2 * s.n * rows * s.d, "hidden": 2 * s.n * rows * hidden}

    def check(self, spec):
        if self.bidirectional and spec.d_model % 2:
            return f"a bidirectional recurrent layer needs an even d_model (got {spec.d_model})"
        return None

    def lower(self, b, name, x):
        d = b.spec.d_model
        hidden = d // 2 if self.bidirectional else d
        rows, bound = GATES[self.cell] * hidden, 1 / math.sqrt(hidden)
        params = {}
        for suffix in ("", "_reverse") if self.bidirectional else ("",):
            params[f"weight_ih_l0{suffix}"] = ((rows, d), f"uniform:{bound}")
            params[f"weight_hh_l0{suffix}"] = ((rows, hidden), f"uniform:{bound}")
            if b.spec.bias:
                params[f"bias_ih_l0{suffix}"] = ((rows,), f"uniform:{bound}")
                params[f"bias_hh_l0{suffix}"] = ((rows,), f"uniform:{bound}")
        attrs = {"cell": self.cell, "hidden": hidden, "bidirectional": self.bidirectional}
        return b.op(name, "recurrent", [x], attrs=attrs, params=params, layer=self)
