"""``decoder_shortlist.onnx``: the ``decoder`` step whose output projection and softmax cover
only ``candidates`` (n,), int64 target ids (a target-vocabulary shortlist, ``tfspec.shortlist``):
the projection's rows are gathered by them, ``log_probs`` is (batch, n) over them and
``top_ids`` are mapped back to vocabulary ids (``export --shortlist``)."""

from __future__ import annotations

from onnx import TensorProto

from . import register
from .decoder import Decoder


@register
class Shortlist(Decoder):
    name, order = "decoder_shortlist", 4

    @classmethod
    def written(cls, graph, asked) -> bool:
        return asked.shortlist and "tgt" in graph.ports

    @classmethod
    def opened_at_load(cls, provider: str) -> bool:
        return False  # opened by decoder(shortlist=True)

    def declare(self, e) -> None:
        e.cached("candidates", lambda: e.b.input("candidates", ["candidates"], TensorProto.INT64))

    def logits(self, e, x: str, weight: str, bias: str | None) -> str:
        """Logits (B, n) of the candidates only: x W[candidates]^T + b[candidates], the (vocab, d)
        matrix's rows gathered per batch (a step then reads n rows, not vocab)."""
        b, ids = e.b, e.cached("candidates", None)
        rows = b.op("Gather", b.param(weight), ids, axis=0)
        y = b.op("Gemm", x, rows, None if bias is None else b.op("Gather", b.param(bias), ids, axis=0), transB=1)
        b.flat.add(y)
        return y

    def log_probs(self, e, log_probs: str) -> str:
        return e.b.output("log_probs", log_probs, ["batch", "candidates"])

    def ids(self, e, ids: str) -> str:
        return e.b.op("Gather", e.cached("candidates", None), ids, axis=0)  # positions among them -> ids
