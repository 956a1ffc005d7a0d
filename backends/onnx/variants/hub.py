"""The encoder graphs of Hugging Face's ONNX layout (``hub.py``): what optimum's
``ORTModelForSequenceClassification``, ``...ForTokenClassification``, ``...ForQuestionAnswering``,
``...ForMaskedLM`` and ``...ForFeatureExtraction`` and transformers.js's pipelines read::

    input_ids, attention_mask (batch, sequence_length) int64; token_type_ids where the model has segments;
    or pixel_values (batch, channels, height, width) for an image model
    -> logits                         text- and image-classification (batch, labels), token-classification
                                      (batch, sequence_length, labels), fill-mask (..., vocab)
    -> start_logits, end_logits       question-answering (batch, sequence_length)
    -> logits_per_image, logits_per_text, text_embeds, image_embeds
                                      zero-shot-image-classification: a dual encoder's (CLIP, SigLIP)
                                      texts against its images (pixel_values (images, ...))
    -> last_hidden_state              feature-extraction (batch, sequence_length, d_model), with
       (pooler_output)                the pooler's (batch, d_model) where the model has one

The task is the caller's (from the architecture its ``config.json`` names); the lowerings and
the padding rules are the full-sequence graph's (``model``).
"""

from __future__ import annotations

from onnx import TensorProto

from . import Variant, mask_name, padding
from .model import Model

TASKS = ("text-classification", "token-classification", "question-answering", "fill-mask", "feature-extraction",
         "image-classification", "zero-shot-image-classification")
NAMES = {"src": "input_ids", "tgt": "input_ids", "segments": "token_type_ids"}
"""tfspec's token inputs -> transformers' names."""


class HubEncoder(Model):
    """One task's graph; not registered (no ``tfspec.json`` lists it): ``hub.export_hub`` passes
    an instance to ``graphs.emit``."""

    name, listed, fusable = "hub_encoder", False, False

    def __init__(self, task: str):
        if task not in TASKS:
            raise ValueError(f"no Hugging Face encoder task {task!r} (there are {', '.join(TASKS)})")
        self.task = task

    def ports(self, graph):
        ports = graph.ports
        fed = {ports[p] for p in ("src", "tgt", "segments", "pixel_values") if p in ports}
        wanted = {"feature-extraction": ("memory", "pooled"), "zero-shot-image-classification": graph.outputs}
        return fed, [ports[p] for p in wanted.get(self.task, ("logits",)) if p in ports]

    def tokens(self, e, node) -> str:
        b, seq = e.b, node.shape[1]
        tokens = b.input(NAMES[node.name], ["batch", "sequence_length"], TensorProto.INT64)
        if seq not in e.lengths:
            e.lengths[seq] = b.shape_of(tokens, 1)
        if not node.attrs.get("optional"):
            mask = b.input(mask_name(e.graph, "src"), ["batch", "sequence_length"], TensorProto.INT64)
            padding(e, seq, mask)
        return tokens

    def outputs(self, e, env: dict) -> None:
        b, graph, ports = e.b, e.graph, e.graph.ports
        d = graph.spec.d_model
        if self.task == "zero-shot-image-classification":  # optimum's names are the ports' own
            for port in graph.outputs:
                shape = graph.node(ports[port]).shape
                b.output(port, env[ports[port]], [{"B": "batch", "N": "images"}.get(d, d) for d in shape])
            return
        if self.task == "feature-extraction":
            b.output("last_hidden_state", b.sequence(env[ports["memory"]], d), ["batch", "sequence_length", d])
            if "pooled" in ports:
                b.output("pooler_output", env[ports["pooled"]], ["batch", d])
            return
        shape = graph.node(ports["logits"]).shape
        logits = b.sequence(env[ports["logits"]], shape[-1]) if len(shape) == 3 else env[ports["logits"]]
        if self.task == "question-answering":  # (B, L, 2) -> two (B, L), as transformers splits qa_outputs
            start, end = b.op("Split", logits, b.ints(1, 1), axis=-1, outputs=2)
            for name, value in (("start_logits", start), ("end_logits", end)):
                b.output(name, b.op("Squeeze", value, b.ints(-1)), ["batch", "sequence_length"])
            return
        b.output("logits", logits, ["batch", *(["sequence_length"] if len(shape) == 3 else []), shape[-1]])
