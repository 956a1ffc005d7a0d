"""What ``tfspec export`` is asked to write, and the combinations no export writes, checked once.

An options model (``tfspec.options``): ``tfspec export``'s flags for these fields are generated
from them (``tfspec.cli.fields``), and the command checks them before it reads a spec or imports
a checkpoint; ``backends.onnx.export`` and the streamed route check the same model, so a Python
caller is refused in the command's words (they name the flags, which is what a user of either
sets). The first conflict is reported, in the order a reader meets them: the format, then int4,
then the float32-only options.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import model_validator

from tfspec.options import Options, choice, one_of, options, whole
from tfspec.spec.base import field_error

FORMATS = ("onnx", "hf", "genai", "optimum")
ONE_GRAPH = {"genai": "onnxruntime-genai", "optimum": "optimum and transformers.js"}
"""The formats that write the graphs another runtime drives, and that runtime."""
DEFAULT_OPSET = 18
"""The opset of an export not told one (``opset`` None)."""


@options
class ExportOptions(Options):
    """The format and the graphs and weights an export writes (``tfspec export``'s switches)."""

    format: choice(*FORMATS) = "onnx"
    """onnx: ONNX graphs for onnxruntime; hf: config.json + model.safetensors that
    transformers loads with from_pretrained (specs that are exactly GPT-2, BERT, Llama, Mistral,
    Qwen2, Marian, BART or T5); genai: model.onnx + genai_config.json for onnxruntime-genai
    (decoder-only specs); optimum: config.json, generation_config.json, the tokenizer and
    onnx/model.onnx (seq2seq: onnx/encoder_model.onnx and decoder_model_merged.onnx), the layout
    optimum's ORTModelFor* classes and transformers.js open unchanged (specs of a transformers
    family: generators, seq2seq models and encoders)."""
    opset: whole(17, 23) | None = None
    """ONNX opset, 17-23 (default 18); 23 emits the fused Attention op."""
    fp16: bool = False
    """Float16 weights (and, in ONNX, activations; for GPUs)."""
    int8: bool = False
    """ONNX: int8 weights for every matrix product (dynamic quantisation per output channel; 1/4
    of the bytes read per step, so faster where decoding is bound by memory: BENCHMARKS.md),
    quantised tensor by tensor while streaming; checked against PyTorch holding the same int8
    weights and against float32 (with --shortlist: in memory, float32 parity checked first,
    then greedy agreement with float32 reported); optimum: adds *_quantized.onnx, what
    transformers.js loads with dtype 'q8'."""
    int4: bool = False
    """ONNX, genai and optimum (adds *_q4.onnx: transformers.js's dtype 'q4'): 4-bit weights for
    every projection (onnxruntime's MatMulNBits, blocks along the input dimension; 1/8 of
    float32's bytes, so faster where decoding is bound by memory), quantised tensor by tensor
    while streaming (a bf16 checkpoint never becomes float32 in full); checked against PyTorch
    holding the same int4 weights and against float32."""
    int4_block: one_of(32, 64, 128) = 32
    """With --int4: values per scale, 32, 64 or 128 (the fewer, the smaller the error)."""
    int4_zero_points: bool = False
    """With --int4: a 4-bit zero point per block (asymmetric) instead of symmetric blocks."""
    int4_embeddings: choice("int8", "int4") = "int8"
    """With --int4: bits of the token embedding table and the output projection, in symmetric
    blocks (they take the largest share of the 4-bit error)."""
    int4_calibrate: Path | None = None
    """With --int4: activation-aware scales (AWQ-style) from the model run on this file's lines
    of text, instead of rounding to nearest (models whose float32 form fits in memory)."""
    stream: bool = False
    """ONNX and genai: write the weights one tensor at a time from SPEC's safetensors into one
    external data file (model.onnx.data), never the whole model in memory; chosen by itself
    with --int4 and --int8 and when the float32 model would not fit."""
    static_cache: bool = False
    """ONNX: also write decoder_static.onnx, a decoding step over a preallocated cache whose
    shapes never change, which onnxruntime's CUDA provider captures as CUDA graphs (one launch
    per step instead of one per node); translate uses it on CUDA; checked token for token
    against the growing-cache step graph. On CPU the growing cache stays faster."""
    generate: bool = False
    """ONNX: also write generate.onnx, the encoder and the whole search (greedy or beam, length
    penalty, end of sentence) in one graph of standard ONNX operators: input_ids, max_length,
    num_beams, length_penalty in; sequences, sequences_scores out (docs/export-onnx.md);
    checked token for token against the Python search."""
    fused: bool = False
    """ONNX: onnxruntime's fused CPU operators (MultiHeadAttention,
    SkipSimplifiedLayerNormalization) in place of the standard-op patterns, and
    decoder_inplace.onnx, a step whose GroupQueryAttention extends the key/value cache in place
    instead of copying it: fewer nodes and copies per step, faster decoding on CPU; runs on
    onnxruntime only (docs/export-onnx.md)."""
    shortlist: Path | None = None
    """A corpus directory whose training pairs give the target-vocabulary shortlist (ONNX,
    encoder-decoders: ``tfspec.shortlist``)."""
    tokenizer: Path | None = None
    """tfspec's sentencepiece model to ship beside ONNX graphs."""

    @model_validator(mode="after")
    def _combinable(self):
        reason = self.conflict()
        if reason is not None:
            raise field_error(reason[0], reason[1])
        return self

    def conflict(self) -> tuple[str, str] | None:
        """The first (field, why) of what no export combines; None when it all goes together."""
        onnx_only = "--format onnx" if self.format == "onnx" else f"--format onnx, not {self.format}"
        if self.tokenizer is not None and self.format != "onnx":
            return "tokenizer", f"--tokenizer applies to {onnx_only}"
        if self.format == "hf" and (name := self._first_set("opset", "int8", "int4", "static_cache", "generate",
                                                               "fused")):
            return name, (f"{_flag(name)} applies to --format onnx; a Hugging Face checkpoint keeps float weights "
                          "and has no graphs")
        if self.format in ONE_GRAPH and (name := self._first_set(
                "static_cache", "generate", "fused", *(["int8"] if self.format == "genai" else []))):
            return name, (f"{_flag(name)} applies to --format onnx; --format {self.format} writes the graphs "
                          f"{ONE_GRAPH[self.format]} drive")
        if not self.int4 and (name := self._first_changed("int4_block", "int4_zero_points", "int4_embeddings",
                                                          "int4_calibrate")):
            return name, f"{_flag(name)} sets how --int4 quantises: add --int4"
        if self.int4 and (name := self._first_set("int8", "fp16", "fused", "shortlist", "static_cache")):
            return name, f"--int4 writes float32 graphs whose projections are MatMulNBits: leave out {_flag(name)}"
        if self.shortlist is not None and self.format != "onnx":
            return "shortlist", f"--shortlist applies to {onnx_only}"
        return self._float32_only()

    def _float32_only(self) -> tuple[str, str] | None:
        """What only float32 graphs (or only the step graphs of the Python search) carry."""
        if self.int8 and self.fp16:
            return "fp16", "--int8 quantises the float32 graphs' weights: leave out --fp16"
        if self.fused and self.fp16:
            return "fp16", "--fused emits onnxruntime's fused CPU operators into float32 graphs: leave out --fp16"
        if self.fused and self.generate:
            return "generate", ("--fused: generate.onnx is standard ONNX operators only, for every runtime: leave "
                                "out --generate (or export it separately)")
        return None

    def _first_changed(self, *names: str) -> str | None:
        """The first of ``names`` not at its default."""
        return next((n for n in names if getattr(self, n) != self.__pydantic_fields__[n].default), None)

    def _first_set(self, *names: str) -> str | None:
        """The first of ``names`` given (a switch on, a value not None)."""
        return next((n for n in names if getattr(self, n) not in (None, False)), None)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")
