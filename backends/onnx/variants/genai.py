"""ONNX Runtime GenAI's format: ``tfspec export --format genai`` (``model.onnx`` + ``genai_config.json``).

onnxruntime-genai runs its own decoding loop over one graph, with these names and layouts
(what its model builder writes, for the runtime's default ``past_present_share_buffer: false``):

    input_ids                 int64 (batch, new)     tokens of this call (the prompt, then one)
    attention_mask            int64 (batch, total)   1 at real tokens of past + new, 0 at padding
    position_ids              int64 (batch, new)     each token's position (when the model has any)
    past_key_values.N.key     (batch, kv_heads, past, head_size), value alike; past 0 at first
    -> logits                 (batch, new, vocab)    the runtime picks each row's last real token
    -> present.N.key/value    (batch, kv_heads, past + new, head_size): the next call's past

The runtime pads a batch of prompts on the right with ``pad_token_id`` (mask 0, position 0)
and appends each new token after the padding, so padding stays in the middle of every row's
cache: keys are hidden by ``attention_mask``, positions come from ``position_ids``, never from
cache indices. The graph is emitted from the IR with the shared lowerings; only inputs,
state names, positions and outputs differ from the ``decoder`` step graph (``Genai``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from tfspec import __version__
from tfspec.errors import TfspecError
from tfspec.ir import Graph
from tfspec.ir.ops import definition

from ..exporter import Exported, publish, save_graph
from ..graphs import emit
from . import register
from .decoder import Decoder

CONFIG = "genai_config.json"
GRAPH = "model.onnx"
HF_TYPES = ("llama", "mistral", "qwen2")
"""Hugging Face families whose name genai takes as ``model.type`` for this graph layout."""


def refusal(graph: Graph) -> str | None:
    """Why genai's format cannot carry ``graph`` (one line), or None."""
    spec = graph.spec
    if spec.family != "decoder-only":
        return (f"{spec.name} is {spec.family}: --format genai writes decoder-only models (onnxruntime-genai "
                "runs one causal step graph); use --format onnx")
    if spec.head is not None:
        return (f"{spec.name} has a {spec.head.kind} head: --format genai writes text generators (onnxruntime-genai "
                "samples tokens from the logits); use --format onnx")
    shapes = set()
    for node in graph.nodes():
        op = definition(node.op)
        if op.carries or (op.cached(node) is not None and node.op != "attention"):
            return (f"{spec.name}: {node.name} is IR op {node.op!r}, which carries state genai does not keep (the "
                    "runtime keeps only attention keys and values between steps); use --format onnx")
        if node.op != "attention":
            continue
        a = node.attrs
        if not node.layer.plain_causal:
            return (f"{spec.name}: {node.name} is {node.layer.kind}; --format genai takes causal self-attention "
                    "over the whole cache (the runtime keeps every key); use --format onnx")
        if node.layer.positions is not None and node.layer.positions.reads_cache_indices:
            kind = node.layer.positions.kind
            return (f"{spec.name}: {node.name} uses {kind} positions, which the graph would read from cache "
                    "indices; genai pads prompts inside the cache; use --format onnx")
        shapes.add((a["heads"], a["kv_heads"], a["d_k"], a["d_v"]))
    if len(shapes) != 1 or any(d_k != d_v for *_, d_k, d_v in shapes):
        return (f"{spec.name}: --format genai needs every layer's heads, key/value heads and d_k = d_v alike "
                f"(genai_config.json has one head_size); found (heads, kv_heads, d_k, d_v) {sorted(shapes)}")
    return None


@register
class Genai(Decoder):
    """The step graph as genai feeds it: its state names, positions per row, padding by mask,
    the logits of every new token (genai picks each row's last real one)."""

    name, order, step, listed, fusable = "genai", 7, False, False, False

    @classmethod
    def written(cls, graph, asked) -> bool:
        return False  # its own format (``export_genai``), never beside tfspec's graphs

    def ports(self, graph):
        return {graph.ports["tgt"]}, [graph.ports["logits"]]

    def tokens(self, e, node) -> str:
        b = e.b  # input_ids first: the builder reads the batch size from it
        tokens = b.input("input_ids", ["batch", "sequence_length"], TensorProto.INT64)
        mask = b.input("attention_mask", ["batch", "total_sequence_length"], TensorProto.INT64)
        e.pads[node.shape[1]] = b.op("Equal", mask, b.const(np.int64(0)))  # keys only: (B, total)
        return tokens

    def state(self, e, node, role: str, shape) -> str:
        return e.b.input(f"past_key_values.{_layer(e, node)}.{role}", shape)

    def present(self, e, node, role: str, value: str, shape) -> str:
        return e.b.output(f"present.{_layer(e, node)}.{role}", value, shape)

    def positions(self, e, seq: str, x: str | None) -> str:
        """int64 (B, L): the runtime's ``position_ids`` (declared by the first layer that asks)."""
        return e.cached("position_ids", lambda: e.b.input("position_ids", ["batch", "sequence_length"],
                                                          TensorProto.INT64))

    def outputs(self, e, env: dict) -> None:
        vocab = e.graph.node(e.graph.ports["logits"]).attrs["vocab"]
        e.b.output("logits", e.b.sequence(env[e.graph.ports["logits"]], vocab), ["batch", "sequence_length", vocab])


def _layer(e, node) -> int:
    """genai's index of attention layer ``node``: its place among the graph's attention nodes."""
    layers = e.cached("genai_layers", lambda: {n.name: i for i, n in enumerate(
        n for n in e.graph.nodes() if n.op == "attention")})
    return layers[node.name]


def emit_genai(graph: Graph, weights: dict[str, np.ndarray], opset: int = 18, dtype: str = "float32",
               metadata: dict[str, str] | None = None, quant=None, sink=None) -> onnx.ModelProto:
    """The genai step graph of ``graph`` (see the module docstring) with ``weights``, quantised
    with ``quant``, its initializers written to ``sink`` (as ``graphs.emit``)."""
    if reason := refusal(graph):
        raise TfspecError(reason)
    return emit(graph, "genai", weights, opset, dtype, metadata, quant, sink)


def runtime_type(exact: str | None) -> str:
    """genai's ``model.type``: ``exact``, the Hugging Face family that computes exactly what the
    spec does (the caller asks ``tfspec.interop``: the backend loads no family), when it is one
    of ``HF_TYPES``, else ``decoder``, genai's generic decoder-only type. The type picks the
    runtime's conventions, not the math (the graph does that); never ``gpt2``, which genai reads
    as GPT-2's old combined cache ``past_N`` (2, batch, heads, seq, size), not this layout."""
    return exact if exact in HF_TYPES else "decoder"


def genai_config(graph: Graph, inputs: list[str], model_type: str = "decoder") -> dict:
    """``genai_config.json`` for the graph whose input names are ``inputs``: what genai's model
    builder writes, with greedy search by default; ``model_type`` from ``runtime_type``."""
    spec, vocab = graph.spec, graph.spec.vocab
    attention = [n.attrs for n in graph.nodes() if n.op == "attention"]
    context = spec.positional.max_len
    names = {"input_ids": "input_ids", "attention_mask": "attention_mask"}
    if "position_ids" in inputs:
        names["position_ids"] = "position_ids"
    names |= {"past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"}
    decoder = {"session_options": {"log_id": "onnxruntime-genai", "provider_options": []}, "filename": GRAPH,
               "head_size": attention[0]["d_k"], "hidden_size": spec.d_model, "inputs": names,
               "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                           "present_value_names": "present.%d.value"},
               "num_attention_heads": attention[0]["heads"], "num_hidden_layers": len(attention),
               "num_key_value_heads": attention[0]["kv_heads"]}
    return {"model": {"bos_token_id": vocab.bos_id, "context_length": context, "decoder": decoder,
                      "eos_token_id": vocab.eos_token_id,
                      "pad_token_id": vocab.pad_id, "type": model_type,
                      "vocab_size": graph.node(graph.ports["logits"]).attrs["vocab"]},
            "search": {"diversity_penalty": 0.0, "do_sample": False, "early_stopping": True, "length_penalty": 1.0,
                       "max_length": context, "min_length": 0, "no_repeat_ngram_size": 0, "num_beams": 1,
                       "num_return_sequences": 1, "past_present_share_buffer": False, "repetition_penalty": 1.0,
                       "temperature": 1.0, "top_k": 50, "top_p": 1.0}}


def export_genai(model, directory: str | Path, opset: int = 18, fp16: bool = False, parity: bool = True,
                 model_type: str = "decoder") -> Exported:
    """Write ``model`` (a ``TorchModel`` with its weights) in genai's format into ``directory``,
    checked by onnx.checker and, with ``parity``, against the PyTorch backend as genai feeds it."""
    from tfspec.backends.parity.genai import check_genai_parity

    graph = model.graph
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = {name: p.detach().cpu().float().numpy() for name, p in model.named_parameters()}
    metadata = {"tfspec.version": __version__, "tfspec.graph": "genai", "tfspec.export_id": uuid.uuid4().hex,
                "tfspec.spec": json.dumps(graph.spec.model_dump(mode="json"))}
    proto = emit_genai(graph, weights, opset=opset, dtype="float16" if fp16 else "float32", metadata=metadata)
    result = Exported(directory)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=directory))
    try:
        save_graph(proto, staging / GRAPH)
        onnx.checker.check_model(str(staging / GRAPH), full_check=True)
        config = genai_config(graph, [i.name for i in proto.graph.input], model_type)
        (staging / CONFIG).write_text(json.dumps(config, indent=4) + "\n", encoding="utf-8")
        result.files = publish(staging, directory, CONFIG)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if parity:
        result.checks = check_genai_parity(directory / GRAPH, model, tolerance=5e-2 if fp16 else 1e-4)
    return result
