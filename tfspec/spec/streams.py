"""Hyper-connections (Zhu et al. 2024, "Hyper-Connections", §2): the residual stream widened to n
streams H = (h_1 .. h_n), H in R^{n x d} per position, mixed by learned connections instead of the
fixed x + f(x) (§3.1). Each sub-layer T (attention, feed-forward, ...) with connections
(A_m in R^n, A_r in R^{n x n}, B in R^n) reads h_0 = A_m^T H and writes
H' = B^T T(h_0) + A_r^T H (§2.1); the embeddings enter as n copies and the stack's output is
the streams' sum (§2.3). Static connections are learned matrices; dynamic ones (§2.2) add
s_alpha tanh(norm(H) W_m), s_alpha tanh(norm(H) W_r) and s_beta tanh(norm(H) W_beta)^T to them,
norm the spec's norm_type over each stream. They start as the paper's §2.3 says: sub-layer k
reads stream k mod n (A_m = e_{k mod n}), A_r = I, B = 1, W = 0, so at the start every stream
carries the plain residual stream. x-transformers' ``num_residual_streams`` computes the later
manifold-constrained variant (arXiv 2512.24880: sigmoid-bounded reads and writes and a
Sinkhorn-normalised A_r, dynamic only), not this one: tfspec follows Zhu et al. 2024."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from tfspec.norms import NORMS
from tfspec.spec.base import SpecModel

if TYPE_CHECKING:
    from tfspec.spec.schema import Spec

MAX_STREAMS = 16
"""The paper trains n = 1, 2, 4 and 8; wider is refused rather than guessed at."""


class ResidualStreams(SpecModel):
    """n residual streams joined by hyper-connections (module docstring)."""

    count: int = Field(ge=1, le=MAX_STREAMS)
    """n, the expansion rate: the residual stream is n x d_model wide."""
    dynamic: bool = True
    """Connections that also depend on the streams (DHC, §2.2: the paper's better variant);
    false: static connections (SHC, §2.1), learned matrices alone."""
    start_scale: float = Field(0.01, ge=0, le=1)
    """s_alpha's and s_beta's starting value (dynamic only; x-transformers' 0.01)."""

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when the rest of ``spec`` cannot carry n residual streams."""
        if spec.norm != "pre" or spec.residual != "sequential":
            return "residual_streams", (f"hyper-connections read each sub-layer's input from the streams and "
                                        f"normalise it there: set norm: pre and residual: sequential (norm is "
                                        f"{spec.norm}, residual {spec.residual})")
        if self.dynamic and not NORMS[spec.norm_type].inside_ops:
            return "residual_streams.dynamic", (f"dynamic connections normalise the streams inside their op, "
                                                f"which does not compute norm_type {spec.norm_type}: use "
                                                "dynamic: false, or norm_type layer or rms")
        for name, stack in spec.stacks:
            if stack.shared:
                return f"{name}.shared", ("a shared (universal) stack adds its timestep signal to one stream: "
                                          "drop shared or residual_streams")
        return None

    def weight_params(self, spec: Spec, k: int) -> dict:
        """The connections of the stack's ``k``-th sub-layer: role -> (shape, init) (§2.3's start)."""
        n, d = self.count, spec.d_model
        params = {"a_m": ((n,), f"onehot:{k % n}"), "a_r": ((n, n), "eye"), "b": ((n,), "ones")}
        if self.dynamic:
            params |= {f"norm_{role}": p for role, p in NORMS[spec.norm_type].params(spec, d).items()}
            params |= {"w_m": ((d,), "zeros"), "w_r": ((d, n), "zeros"), "w_b": ((d,), "zeros"),
                       "s_alpha": ((1,), f"constant:{self.start_scale!r}"),
                       "s_beta": ((1,), f"constant:{self.start_scale!r}")}
        return params
