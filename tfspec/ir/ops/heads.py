"""What reads the last hidden states: the pre-softmax projection (§3.4), its log-softmax, the
dense transform of masked-LM heads, BERT's pooler and the task heads' pooling and classifier."""

from __future__ import annotations

import sympy

from . import Op, keeps_inputs, keeps_inputs_and_output, no_products, register, width


@register
class Projection(Op):
    """Hidden states -> vocabulary logits (the tied or untied output matrix)."""
    name, position_wise = "projection", True
    saved = staticmethod(keeps_inputs)

    @staticmethod
    def flops(node, s, dense=False):
        return {"logits": 2 * s.n * width(node, s) * s.V}


@register
class LogSoftmax(Op):
    name, position_wise = "log_softmax", True
    flops, saved = staticmethod(no_products), staticmethod(keeps_inputs_and_output)


@register
class Dense(Op):
    """A d -> width linear map with an activation (BERT's masked-LM transform)."""
    name, position_wise = "dense", True
    saved = staticmethod(keeps_inputs)

    @staticmethod
    def flops(node, s, dense=False):
        return {"dense": 2 * s.n * s.d * width(node, s)}


@register
class Pooler(Op):
    """BERT's pooler: the first position through a d x d layer, one per sequence."""
    name = "pooler"
    saved = staticmethod(keeps_inputs_and_output)

    @staticmethod
    def flops(node, s, dense=False):
        return {"pooler": 2 * s.d * s.d}


@register
class Classifier(Op):
    """A task head's classes from one vector per sequence (B, d) or from each position's, reading
    ``features`` features where a projector narrowed them, else d."""
    name = "classifier"
    saved = staticmethod(keeps_inputs_and_output)

    @staticmethod
    def flops(node, s, dense=False):
        positions = s.n if len(node.shape) == 3 else sympy.Integer(1)  # an expression even where no symbol is left
        parts = node.attrs.get("parts", 1)  # d-wide vectors side by side: DINOv2's class token and patch mean, 2
        return {"classifier": 2 * positions * parts * width(node, s) * node.attrs["classes"]}


@register
class Projector(Op):
    """A linear map of one pooled vector per sequence, d -> ``width`` (wav2vec 2.0's projector)."""
    name = "projector"
    saved = staticmethod(keeps_inputs)

    @staticmethod
    def flops(node, s, dense=False):
        return {"projector": 2 * s.d * node.attrs["width"]}


@register
class First(Op):
    """A sequence's first position (a class token's state)."""
    name = "first"
    flops, saved = staticmethod(no_products), staticmethod(keeps_inputs_and_output)


@register
class MeanPool(Op):
    """The mean over a sequence's real positions."""
    name = "mean_pool"
    flops, saved = staticmethod(no_products), staticmethod(keeps_inputs_and_output)
