"""Output heads other than the pre-softmax token projection: the ``head`` field of a spec.

Each kind is one model with ``kind`` as its tag, ``check(spec)`` for cross-field rules and
``lower(b, x)`` for its IR; ``Head`` is the discriminated union of the kinds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import Field

from tfspec.spec.base import SpecModel
from tfspec.spec.bounds import TokenId

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec


class CtcHead(SpecModel):
    """Connectionist temporal classification (Graves et al. 2006): per frame, log-probabilities
    of every label and of a blank (eq. 1); a labelling's probability sums over all frame paths
    that collapse to it (repeats merged, blanks dropped; eq. 2-3). ``vocab.size`` counts the
    labels plus the blank."""

    kind: Literal["ctc"] = "ctc"
    alphabet: str = Field(min_length=1, max_length=4096)
    """The labels, one character each, in id order with the blank's id skipped (``'0123456789'``
    with blank 0: id 1 is '0', id 10 is '9'); decoders print these characters."""
    blank: TokenId = 0
    """The blank's id (0, as torch.nn.functional.ctc_loss assumes by default)."""

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when ``spec`` cannot carry this head."""
        if spec.family != "encoder-only":
            return "family", f"a ctc head labels encoder frames: set family encoder-only (got {spec.family})"
        if len(set(self.alphabet)) != len(self.alphabet):
            return "head.alphabet", f"alphabet {self.alphabet[:60]!r} repeats a character: each label needs its own"
        if spec.vocab.size != len(self.alphabet) + 1:
            return "vocab.size", (f"vocab.size ({spec.vocab.size}) must be the labels plus the blank: "
                                  f"{len(self.alphabet)} + 1 = {len(self.alphabet) + 1}")
        if self.blank >= spec.vocab.size:
            return "head.blank", f"head.blank ({self.blank}) must be below vocab.size ({spec.vocab.size})"
        return None

    @property
    def symbols(self) -> list[str]:
        """The character of every output id ('' at the blank)."""
        chars = list(self.alphabet)
        return chars[:self.blank] + [""] + chars[self.blank:]

    def lower(self, b: LayerBuilder, x: str) -> None:
        """The projection to labels + blank (port ``logits``) and its log-softmax over them
        (port ``log_probs``, the y_k^t of eq. 1 in log space)."""
        classes, d = b.spec.vocab.size, b.spec.d_model
        logits = b.op("output", "projection", [x], attrs={"vocab": classes}, component="projection",
                      params={"weight": ((classes, d), "xavier_uniform"), "bias": ((classes,), "zeros")},
                      shape=("B", b.seq, classes))
        b.graph.ports["logits"] = logits
        b.graph.ports["log_probs"] = b.op("output.log_softmax", "log_softmax", [logits], shape=("B", b.seq, classes))


Head = Annotated[Union[(CtcHead,)], Field(discriminator="kind")]
"""Every head kind, told apart by ``kind``."""
