"""Hugging Face's ONNX layout (``tfspec export --format optimum``): a directory that optimum's
``ORTModelFor*.from_pretrained(dir)`` and transformers.js's ``pipeline(task, dir)`` open with no
other argument, as they open ``optimum-cli export onnx``'s::

    config.json                 transformers' (the caller writes it from the model's family: the
                                backend loads no family); generation_config.json for generators
    tokenizer files             copied by the caller
    onnx/model.onnx             text-generation: input_ids, attention_mask, position_ids,
                                past_key_values.N.key/value (batch, kv_heads, past, d) -> logits
                                (batch, new, vocab), present.N.key/value; the encoder tasks:
                                ``variants.hub``

optimum finds ``onnx/model.onnx`` by its ``**/*.onnx`` glob; transformers.js reads ``onnx/`` for
its default float32. The text-generation graph is genai's (``variants.genai``): onnxruntime-genai,
optimum and transformers.js feed one protocol (past keys and values in, presents out, padding
by ``attention_mask``, positions by ``position_ids``), so one variant serves the three.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from pathlib import Path

import onnx

from tfspec import __version__

from .exporter import Exported, publish, save_graph
from .graphs import emit
from .variants.genai import emit_genai
from .variants.hub import HubEncoder

GRAPH = Path("onnx") / "model.onnx"
CONFIG = "config.json"
GENERATION = "generation_config.json"
ARCHITECTURE_TASKS = (("ForConditionalGeneration", None), ("MTModel", None),
                      ("ForCausalLM", "text-generation"), ("LMHeadModel", "text-generation"),
                      ("ForSequenceClassification", "text-classification"),
                      ("ForTokenClassification", "token-classification"),
                      ("ForQuestionAnswering", "question-answering"), ("ForMaskedLM", "fill-mask"),
                      ("Model", "feature-extraction"))
"""transformers' class-name endings -> the task (pipeline) name optimum and transformers.js give them."""


def task_of(architecture: str) -> str | None:
    """The task of a transformers architecture (``LlamaForCausalLM`` -> ``text-generation``), or
    None for those this layout does not hold yet (seq2seq's ``...ForConditionalGeneration``)."""
    return next((task for end, task in ARCHITECTURE_TASKS if architecture.endswith(end)), None)


def is_hub_export(directory: Path) -> bool:
    """Whether ``directory`` holds an export this module wrote (its graph's metadata says so)."""
    path = directory / GRAPH
    try:
        meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    except Exception:  # not a readable ONNX file: not this module's
        return False
    return meta.get("tfspec.graph") == "optimum"


def generation_config(config: dict) -> dict:
    """``generation_config.json`` as transformers derives it from a model's config
    (``GenerationConfig.from_model_config``): its special ids, greedy search."""
    ids = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if config.get(k) is not None}
    return ids | {"do_sample": False, "transformers_version": config.get("transformers_version", "4.57.0")}


def export_hub(model, directory: str | Path, config: dict, task: str, opset: int = 18, fp16: bool = False,
               parity: bool = True) -> Exported:
    """Write ``model`` (a ``TorchModel`` with its weights) in the layout of the module docstring
    for ``task`` (``task_of``), ``config`` its transformers configuration; checked by
    onnx.checker and, with ``parity``, against the PyTorch backend fed as the loaders feed it."""
    from tfspec.backends.parity.genai import check_genai_parity
    from tfspec.backends.parity.hub import check_hub_parity

    graph, directory = model.graph, Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = {name: p.detach().cpu().float().numpy() for name, p in model.named_parameters()}
    metadata = {"tfspec.version": __version__, "tfspec.graph": "optimum", "tfspec.export_id": uuid.uuid4().hex,
                "tfspec.spec": json.dumps(graph.spec.model_dump(mode="json"))}
    dtype, generating = "float16" if fp16 else "float32", task == "text-generation"
    proto = emit_genai(graph, weights, opset=opset, dtype=dtype, metadata=metadata) if generating else \
        emit(graph, HubEncoder(task), weights, opset, dtype, metadata)
    result = Exported(directory)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=directory))
    try:
        (staging / GRAPH.parent).mkdir()
        save_graph(proto, staging / GRAPH)
        del proto
        onnx.checker.check_model(str(staging / GRAPH), full_check=True)
        config = config | {"torch_dtype": dtype} | ({"use_cache": True} if generating else {})
        (staging / CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        if generating:
            (staging / GENERATION).write_text(json.dumps(generation_config(config), indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(directory / GRAPH.parent, ignore_errors=True)  # an earlier export's (is_hub_export)
        (directory / GRAPH.parent).mkdir()
        graphs = publish(staging / GRAPH.parent, directory / GRAPH.parent, GRAPH.name)
        (staging / GRAPH.parent).rmdir()
        result.files = {f"{GRAPH.parent}/{name}": size for name, size in graphs.items()}
        result.files |= publish(staging, directory, CONFIG)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if parity:
        tolerance = 5e-2 if fp16 else 1e-4
        result.checks = check_genai_parity(directory / GRAPH, model, tolerance) if generating else \
            check_hub_parity(directory / GRAPH, model, task, tolerance)
    return result
