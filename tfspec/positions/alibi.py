"""ALiBi (Press et al. 2022: BLOOM, MPT): each head's logits penalised by a fixed slope times
the distance |i - j|, no parameters (slopes ``tfspec.ir.positions.alibi_slopes``; the backends'
score terms ``backends/{torch,onnx}/scores/alibi.py``)."""

from __future__ import annotations

from tfspec.positions import PositionKind, register


@register
class Alibi(PositionKind):
    name, order = "alibi", 5
    summary = ("each head's logits penalised by a fixed slope times the distance |i - j|, no parameters (Press "
               "et al. 2022: BLOOM, MPT; slopes ``tfspec.ir.positions.alibi_slopes``)")
    in_attention = True

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        return False
