"""Token embeddings narrower than d_model, projected into the residual stream and back out.

ALBERT's factorised embedding (Lan et al. 2020, §3.1: a V x E table and an E x H projection in
place of a V x H table; E = 128 for every ALBERT size), ELECTRA's ``embedding_size`` (128 under
electra-small's 256) and OPT-350m's ``word_embed_proj_dim`` (512 under 1024) store the
vocabulary's table at width E and project to d_model before the first layer. On the way out
the last hidden states come back to width E before the token projection, which reads (and may
be tied to) the E-wide table: through BERT's masked-LM head, whose dense layer maps d_model to E
(ALBERT, ELECTRA generators), or through a projection of its own (OPT-350m's ``project_out``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from tfspec.spec.base import SpecModel
from tfspec.spec.bounds import Width

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec


class EmbedProjection(SpecModel):
    """Token embeddings of ``width`` features, projected to d_model by x W^T (+ b)."""

    width: Width
    """E: the token embeddings' width (ALBERT: 128; OPT-350m: 512). It may equal d_model: ALBERT
    projects its embeddings whatever their width."""
    bias: bool = True
    """A bias on the projections (ALBERT's and ELECTRA's have one, OPT-350m's none)."""
    projects: Literal["inputs", "tokens"] = "inputs"
    """inputs: the sum of token, position and segment embeddings is formed at width E, normed
    (``embed_norm``) and dropped out there, then projected (ALBERT, ELECTRA); tokens: the token
    embeddings alone are projected, positions are added at d_model after (OPT-350m)."""
    out: Literal["project", "tied"] | None = None
    """How the last hidden states reach width E for the token projection where no masked-LM head
    (``head_transform``, whose dense layer maps to E) does it. project: a d_model -> E matrix of
    its own (OPT-350m's project_out); tied: the input projection's transpose, no parameters
    (base models whose checkpoints only hold the hidden states: ElectraModel, AlbertModel).
    None with ``head_transform`` or a task ``head``."""

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when the rest of ``spec`` cannot carry this projection."""
        if spec.frames is not None or spec.image is not None:
            return "embed_projection", "frames and images are not token embeddings: drop embed_projection"
        reached = spec.head_transform or spec.head is not None
        if reached and self.out is not None:
            return "embed_projection.out", (f"out: {self.out} has nothing to do: "
                                            f"{'head_transform' if spec.head_transform else 'head'} reads the last "
                                            "hidden states; drop out")
        if not reached and self.out is None:
            return "embed_projection.out", (f"the token projection reads width {self.width}: set out: project (a "
                                            "matrix of its own, OPT-350m) or out: tied (the input projection's "
                                            "transpose), or give head_transform")
        return None

    def lower_in(self, b: LayerBuilder, x: str) -> str:
        """(B, L, E) -> (B, L, d_model): x W_in^T + b_in."""
        d = b.spec.d_model
        params = {"weight": ((d, self.width), "xavier_uniform")}
        if self.bias:
            params["bias"] = ((d,), "zeros")
        return b.op(f"{b.stack}.project_in", "embed_projection", [x], attrs={"features": self.width},
                    params=params, component="embedding")

    def lower_out(self, b: LayerBuilder, x: str, stack: str) -> str:
        """(B, L, d_model) -> (B, L, E) before the token projection: x W_out^T (+ b_out), or
        x W_in with ``out: tied`` (the transpose of ``stack``'s input projection)."""
        d, width = b.spec.d_model, self.width
        if self.out == "tied":
            params = {"weight": f"{stack}.project_in.weight"}
        else:
            params = {"weight": ((width, d), "xavier_uniform")}
            if self.bias:
                params["bias"] = ((width,), "zeros")
        attrs = {"features": width, "transpose": self.out == "tied"}
        return b.op("project_out", "embed_projection", [x], attrs=attrs, params=params, component="projection",
                    shape=("B", b.seq, width))
