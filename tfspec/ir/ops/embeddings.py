"""The ops that turn inputs into the residual stream: token ids and frames in, embedding tables,
segment and position tables, the narrower embedding's projection in and out (ALBERT, OPT-350m)."""

from __future__ import annotations

from . import Op, keeps_inputs, keeps_inputs_and_output, keeps_nothing, no_products, register, rows, width


@register
class Input(Op):
    """Token ids (int64) or frames (float32) as fed."""
    name, position_wise, fed = "input", True, True
    flops, saved = staticmethod(no_products), staticmethod(keeps_nothing)


@register
class Embedding(Op):
    """A table lookup, its output scaled (sqrt(d_model), §3.4): a gather, no products; the
    backward pass keeps the ids (int64) to scatter the table's gradient."""
    name, position_wise = "embedding", True
    flops = staticmethod(no_products)

    @staticmethod
    def saved(graph, node, sizes, out):
        return {f"{node.name}#ids": rows(node, sizes) * 8}


@register
class SegmentEmbedding(Op):
    """BERT's token-type table added to the embeddings."""
    name, position_wise = "segment_embedding", True
    flops, saved = staticmethod(no_products), staticmethod(keeps_inputs_and_output)


@register
class Positional(Op):
    """Sinusoids or a learned table added to the embeddings (§3.5): an add, nothing kept."""
    name, position_wise = "positional", True
    flops, saved = staticmethod(no_products), staticmethod(keeps_nothing)


@register
class ImagePositional(Op):
    """The Image Transformer's row, column and channel embeddings (its positions mix the
    image's layout, so the op does not declare itself position-wise)."""
    name = "image_positional"
    flops, saved = staticmethod(no_products), staticmethod(keeps_inputs_and_output)


@register
class EmbedProjection(Op):
    """E -> d_model on the way in, d_model -> E on the way out."""
    name, position_wise = "embed_projection", True
    saved = staticmethod(keeps_inputs)

    @staticmethod
    def flops(node, s, dense=False):
        return {"embed_projection": 2 * s.n * s.d * width(node, s)}


@register
class FrameProjection(Op):
    """Each frame's features to d_model (CTC over image columns)."""
    name, position_wise = "frame_projection", True
    saved = staticmethod(keeps_inputs_and_output)

    @staticmethod
    def flops(node, s, dense=False):
        return {"frames": 2 * s.n * s.d * node.attrs["features"]}
