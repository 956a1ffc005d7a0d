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
    onnx/encoder_model.onnx     text2text-generation (seq2seq): input_ids, attention_mask ->
    onnx/decoder_model_merged.onnx  last_hidden_state, and the merged decoder (``variants.hub_decoder``)

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
from .variants.hub_decoder import HubDecoder

GRAPH = Path("onnx") / "model.onnx"
SEQ2SEQ = "text2text-generation"
ENCODER, DECODER = GRAPH.with_name("encoder_model.onnx"), GRAPH.with_name("decoder_model_merged.onnx")
CONFIG = "config.json"
GENERATION = "generation_config.json"
ARCHITECTURE_TASKS = (("ForConditionalGeneration", SEQ2SEQ), ("MTModel", SEQ2SEQ),
                      ("ForCausalLM", "text-generation"), ("LMHeadModel", "text-generation"),
                      ("ForSequenceClassification", "text-classification"),
                      ("ForTokenClassification", "token-classification"),
                      ("ForQuestionAnswering", "question-answering"), ("ForMaskedLM", "fill-mask"),
                      ("ForImageClassification", "image-classification"),
                      ("ForImageClassificationWithTeacher", "image-classification"),
                      ("Model", "feature-extraction"))
"""transformers' class-name endings -> the task (pipeline) name optimum and transformers.js give them."""


def task_of(architecture: str) -> str | None:
    """The task of a transformers architecture (``LlamaForCausalLM`` -> ``text-generation``,
    ``MarianMTModel`` -> ``text2text-generation``), or None for one this layout does not hold."""
    return next((task for end, task in ARCHITECTURE_TASKS if architecture.endswith(end)), None)


def is_hub_export(directory: Path) -> bool:
    """Whether ``directory`` holds an export this module wrote (its graph's metadata says so)."""
    path = next((directory / g for g in (GRAPH, ENCODER) if (directory / g).is_file()), directory / GRAPH)
    try:
        meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    except Exception:  # not a readable ONNX file: not this module's
        return False
    return meta.get("tfspec.graph") == "optimum"


def generation_config(config: dict) -> dict:
    """``generation_config.json`` as transformers derives it from a model's config
    (``GenerationConfig.from_model_config``): its special ids, greedy search."""
    special = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "forced_eos_token_id")
    ids = {k: config[k] for k in special if config.get(k) is not None}
    return ids | {"do_sample": False, "transformers_version": config.get("transformers_version", "4.57.0")}


def export_hub(model, directory: str | Path, config: dict, task: str, generation: dict | None = None, opset: int = 18,
               fp16: bool = False, parity: bool = True, quant=None) -> Exported:
    """Write ``model`` (a ``TorchModel`` with its weights) in the layout of the module docstring
    for ``task`` (``task_of``), ``config`` its transformers configuration, ``generation`` the
    checkpoint's own generation config (None: derived from ``config``); checked by
    onnx.checker and, with ``parity``, against the PyTorch backend fed as the loaders feed it.
    With ``quant`` (``int8.Int8``, ``int4.Int4``), each graph also quantised, under the name
    transformers.js gives that form (``QUANTISED``), checked against PyTorch holding its weights."""
    graph, directory = model.graph, Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = {name: p.detach().cpu().float().numpy() for name, p in model.named_parameters()}
    metadata = {"tfspec.version": __version__, "tfspec.graph": "optimum", "tfspec.export_id": uuid.uuid4().hex,
                "tfspec.spec": json.dumps(graph.spec.model_dump(mode="json"))}
    dtype, generating = "float16" if fp16 else "float32", task in ("text-generation", SEQ2SEQ)
    result = Exported(directory)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=directory))
    try:
        (staging / GRAPH.parent).mkdir()
        for form in [None] + ([quant] if quant is not None else []):
            for path, make in graphs_of(task):
                path = quantised(path, form)
                proto = make(graph, weights, opset, dtype, metadata, form)
                save_graph(proto, staging / path)
                del proto  # one graph in memory at a time
                onnx.checker.check_model(str(staging / path), full_check=True)
        config = config | {"torch_dtype": dtype} | ({"use_cache": True} if generating else {})
        (staging / CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        if generating:
            generation = generation or generation_config(config)
            (staging / GENERATION).write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(directory / GRAPH.parent, ignore_errors=True)  # an earlier export's (is_hub_export)
        (directory / GRAPH.parent).mkdir()
        graphs = publish(staging / GRAPH.parent, directory / GRAPH.parent, graphs_of(task)[0][0].name)
        (staging / GRAPH.parent).rmdir()
        result.files = {f"{GRAPH.parent}/{name}": size for name, size in graphs.items()}
        result.files |= publish(staging, directory, CONFIG)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if parity:
        result.checks = check(directory, model, task, 5e-2 if fp16 else 1e-4)
        if quant is not None:
            result.checks += check_quantised(directory, model, task, quant)
    return result


QUANTISED = {"int8": "_quantized", "int4": "_q4"}
"""A quantisation's label -> the suffix transformers.js's ``dtype`` option reads (``q8``: int8
matrix products with activations quantised at run time; ``q4``: MatMulNBits)."""


def quantised(path: Path, quant) -> Path:
    """The file of graph ``path`` quantised with ``quant`` (None: the float graph itself)."""
    return path if quant is None else path.with_name(f"{path.stem}{QUANTISED[quant.label]}{path.suffix}")


def graphs_of(task: str) -> list[tuple[Path, object]]:
    """The graph files of ``task``, each with ``make(graph, weights, opset, dtype, metadata, quant)``
    emitting it; the first is the file a loader looks for first (published last)."""
    if task == SEQ2SEQ:
        return [(ENCODER, lambda *a: emit(a[0], HubEncoder("feature-extraction"), *a[1:])),
                (DECODER, lambda *a: emit(a[0], HubDecoder(), *a[1:]))]
    if task == "text-generation":
        return [(GRAPH, lambda g, w, opset, dtype, meta, quant: emit_genai(g, w, opset=opset, dtype=dtype,
                                                                          metadata=meta, quant=quant))]
    return [(GRAPH, lambda *a: emit(a[0], HubEncoder(task), *a[1:]))]


def check(directory: Path, model, task: str, tolerance: float, quant=None) -> list:
    """The parity checks of the graphs of ``task`` (quantised with ``quant``) in ``directory``."""
    from tfspec.backends.parity.genai import check_genai_parity
    from tfspec.backends.parity.hub import check_hub_parity, check_seq2seq_parity

    paths = [directory / quantised(path, quant) for path, _ in graphs_of(task)]
    if task == SEQ2SEQ:
        return check_seq2seq_parity(*paths, model, tolerance)
    if task == "text-generation":
        return check_genai_parity(*paths, model, tolerance)
    return check_hub_parity(*paths, model, task, tolerance)


def check_quantised(directory: Path, model, task: str, quant) -> list:
    """The quantised graphs against the PyTorch model holding the weights they multiply by
    (``model`` changed in place), within the quantisation's tolerance for what quantised
    activations alone cost, relative to the largest output value."""
    from tfspec.backends.parity.quant import dequantised, output_scales
    from tfspec.checks import Check

    for path, _ in graphs_of(task):
        dequantised(model, directory / quantised(path, quant), quant)
    tolerance = quant.same_weights * max(output_scales(model).values())
    return [Check(f"{c.name} ({quant.label}, against its own weights in PyTorch)", c.diff, c.tolerance)
            for c in check(directory, model, task, tolerance, quant)]
