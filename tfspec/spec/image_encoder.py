"""An image encoder of its own under a text decoder: the ``image_encoder`` section of a spec
(TrOCR, Li et al. 2021, §2.1: a ViT, DeiT or BEiT encoder and a Transformer text decoder; transformers'
VisionEncoderDecoderModel).

Why this shape. The two halves share no setting: TrOCR-small reads the image at width 384 with a
pre-norm DeiT (epsilon 1e-12, learned positions over patches, a class and a distillation token)
and writes text at width 256 with a post-norm decoder (epsilon 1e-5, learned or sinusoidal token
positions, a LayerNorm on the embeddings). So the encoder is a whole encoder-only spec reading
``patches`` (``vision``), as a dual encoder's image tower is (``tfspec.spec.dual``), and the spec
itself is the decoder: its vocabulary, widths, norms and ``decoder`` stack. Unlike a dual
encoder's tower the image encoder *is* the graph's encoder: it is lowered as stack ``encoder``
(``tfspec.ir.build.build_encoder``), its nodes' sizes the vision spec's (``Graph.spec_of``), so
the encoder graph, the KV-cached decoder and the search run it as any encoder-decoder's, fed
``pixel_values`` instead of source tokens. Where the encoder's width differs from d_model, its
last hidden states are projected to d_model before the cross-attention reads them
(VisionEncoderDecoderModel's ``enc_to_dec_proj``): the ``memory`` port is what the
cross-attention reads, ``encoder_hidden`` the encoder's own states before the projection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfspec.spec.base import SpecModel

if TYPE_CHECKING:
    from tfspec.spec.schema import Spec


class ImageEncoder(SpecModel):
    """The encoder, a spec of its own reading patches, whose last hidden states the decoder's
    cross-attention reads."""

    vision: "Spec"
    """The encoder: an encoder-only spec reading ``patches``, without a head (ViTModel, DeiTModel;
    with ``pooler`` it holds the base model's pooler, which no output reads)."""

    def check(self, spec: Spec) -> tuple[str, str] | None:
        """(field, message) when the decoder ``spec`` cannot read this encoder."""
        if spec.family != "encoder-decoder" or spec.encoder is not None:
            return "image_encoder", ("an image encoder is the encoder of an encoder-decoder: family encoder-decoder "
                                     "with a decoder and no encoder stack")
        if spec.patches is not None or spec.spectrogram is not None or spec.frames is not None:
            return "image_encoder", "the image encoder reads the pixels: drop the decoder spec's own inputs"
        vision = self.vision
        if vision.patches is None or vision.family != "encoder-only" or vision.head is not None:
            return "image_encoder.vision", "the image encoder is an encoder-only spec reading patches, without a head"
        if vision.dual is not None or vision.image_encoder is not None:
            return "image_encoder.vision", "the image encoder is one encoder: no dual or image_encoder of its own"
        return None

    def lower(self, b, hidden: str, out) -> str:
        """The encoder's ``hidden`` states (lowered by ``b``, ``tfspec.ir.build.build_encoder``)
        made the graph's ``memory`` (and, projected by ``out``, the decoder's builder, its
        ``encoder_hidden``) port: the node the decoder's cross-attention reads, (B, S, d_model)."""
        graph, spec = b.graph, out.spec
        d = self.vision.d_model
        if self.vision.pooler:  # the base model's tanh pooler: held and counted, read by no output
            b.op("encoder.pooler", "pooler", [hidden], component="pooler", shape=("B", d),
                 params={"w_pool": ((d, d), "xavier_uniform"), "b_pool": ((d,), "zeros")})
        if d == spec.d_model:
            graph.ports["memory"] = hidden
            return hidden
        graph.ports["encoder_hidden"] = hidden
        memory = out.op("encoder.project", "embed_projection", [hidden], attrs={"features": d}, component="embedding",
                        params={"weight": ((spec.d_model, d), "xavier_uniform"), "bias": ((spec.d_model,), "zeros")})
        graph.ports["memory"] = memory
        return memory
