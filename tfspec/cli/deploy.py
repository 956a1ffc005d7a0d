"""``tfspec export`` and ``tfspec translate``: ONNX graphs for deployment and decoding with them."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from tfspec.cli.fields import add_fields, from_args
from tfspec.cli.models import model_to_export
from tfspec.cli.types import ALPHA, BEAM, SEED, THREADS, integer, out_dir
from tfspec.data.codecs import open_codec, shipped_codec
from tfspec.errors import TfspecError
from tfspec.evaluate import decode_all
from tfspec.export_options import DEFAULT_OPSET, ExportOptions
from tfspec.ir import build_graph
from tfspec.search import SearchOptions
from tfspec.spec import load_spec, resolve

MAX_LINE = 100_000  # characters in one input line: ~100 sentences; models take a few hundred tokens


def cmd_export(args) -> int:
    from tfspec.cli.models import imported_for

    from_args(ExportOptions, args)  # flags no export combines: refused before a checkpoint is read
    if args.format != "hf":  # before a checkpoint directory is imported: that can take minutes
        _check_replaceable(Path(args.output))
    with imported_for(args, Path(args.output).resolve().parent):
        return _export(args)


def _export(args) -> int:
    spec, home = _spec_of(args)
    if args.tokenizer is not None:
        _check_tokenizer(args, spec, home)
    if args.format == "hf":
        from tfspec.cli.interop import export_hf

        return export_hf(args)
    one_graph = args.format in ("genai", "optimum")
    args.opset = args.opset or DEFAULT_OPSET
    _check_replaceable(args.output)
    from tfspec.backends.onnx import export
    from tfspec.backends.onnx.variants import genai

    config, task = _hub_config(spec) if args.format == "optimum" else (None, "text-generation")
    if one_graph and task == "text-generation" and (reason := genai.refusal(build_graph(spec))):
        raise TfspecError(reason.replace("--format genai", f"--format {args.format}"))  # before loading the model
    if args.generate and "tgt" not in build_graph(spec).ports:
        raise TfspecError(f"--generate: {spec.name} has no decoder that generates tokens (family {spec.family})")
    from tfspec.cli.stream import choose_route, export_stream, genai_type, quant_options

    quant = quant_options(args)
    stream, need = choose_route(args, spec, quant)
    started = time.perf_counter()
    if stream and args.format == "optimum":
        raise TfspecError(f"{spec.name}: --format optimum writes from memory, and this export streams (~"
                          f"{need.floating / 2**30:.1f} GiB in float32); use --format onnx or genai")
    if stream:
        result, result.checks = export_stream(args, spec, quant, need, home)
        return _report(args, spec, home, result, started, quant)
    model = model_to_export(spec, args)
    shortlist = _shortlist(args, spec, home) if args.shortlist is not None else None
    if args.format == "optimum":
        from tfspec.backends.onnx.hub import export_hub

        result = export_hub(model, args.output, config, task, generation=_generation_config(home), opset=args.opset,
                            fp16=args.fp16, quant=quant,
                            parity=not args.no_check)
    elif args.format == "genai":
        result = genai.export_genai(model, args.output, opset=args.opset, fp16=args.fp16, parity=not args.no_check,
                                    model_type=genai_type(spec))
    else:
        result = export(model, args.output, opset=args.opset, fp16=args.fp16, parity=not args.no_check,
                        int8=args.int8, static_cache=args.static_cache, generate=args.generate, shortlist=shortlist,
                        fused=args.fused)
    return _report(args, spec, home, result, started)


_ORT_CLASSES = {"text-generation": "ORTModelForCausalLM", "text2text-generation": "ORTModelForSeq2SeqLM",
                "text-classification": "ORTModelForSequenceClassification",
                "token-classification": "ORTModelForTokenClassification",
                "question-answering": "ORTModelForQuestionAnswering", "fill-mask": "ORTModelForMaskedLM",
                "feature-extraction": "ORTModelForFeatureExtraction",
                "image-classification": "ORTModelForImageClassification",
                "zero-shot-image-classification": "ORTModelForZeroShotImageClassification"}
"""optimum's class for each task ``--format optimum`` writes."""


def _hub_config(spec) -> tuple[dict, str]:
    """transformers' ``config.json`` for ``spec`` (``--format optimum``), its family's as ``--format
    hf`` writes it, and the task its architecture names; a spec no family computes, or of a task
    the layout does not hold yet, is refused with the reason."""
    from tfspec.interop.hf.export import family_form, fitting_family

    try:
        family = fitting_family(spec)
    except TfspecError as e:
        raise TfspecError(f"--format optimum needs the config.json of a transformers family: {e}") from None
    config = family.config(family_form(spec))
    architecture = config["architectures"][0]
    if getattr(spec.head, "kind", None) == "embedding" and spec.dual is None:
        raise TfspecError(f"{spec.name} is {architecture}, one tower of a dual encoder: optimum has no task for it "
                          "alone; export the CLIPModel or SiglipModel, or use --format onnx")
    if (task := _hub_task(spec, architecture)) is None:
        raise TfspecError(f"{spec.name} is {architecture}: --format optimum writes generators (decoder-only and "
                          "seq2seq) and encoders (classification, token classification, question answering, "
                          "fill-mask, feature extraction); use --format onnx")
    return config, task


def _hub_task(spec, architecture: str) -> str | None:
    """The pipeline task of ``spec`` exported as ``architecture``: a dual encoder's is zero-shot image
    classification (``CLIPModel`` would read as feature extraction), any other's its class name's."""
    from tfspec.backends.onnx.hub import task_of

    return "zero-shot-image-classification" if spec.dual is not None else task_of(architecture)


def _generation_config(home: Path | None) -> dict | None:
    """The checkpoint's own ``generation_config.json`` where the spec's directory holds one (an
    import keeps it), which an optimum export hands on rather than deriving one from the config."""
    from tfspec.interop.hf.checkpoint import GENERATION_CONFIG

    path = home / GENERATION_CONFIG if home is not None else None
    if path is None or not path.is_file():
        return None
    from tfspec.untrusted import json_object

    return json_object(path, "generation settings")


def _report(args, spec, home, result, started: float, quant=None) -> int:
    """Print what was written, the tokenizer copied and the checks; the exit status. ``quant``:
    the policy a streamed export quantised with (``quant_parity`` checked it)."""
    weights = ", int4 weights" if args.int4 else ", int8 weights" if args.int8 else ""
    print(f"{spec.name}: wrote {', '.join(f'{n} ({s / 2**20:.1f} MiB)' for n, s in result.files.items())} "
          f"to {result.directory} in {time.perf_counter() - started:.1f}s (opset {args.opset}, "
          f"{'float16' if args.fp16 else 'float32'}{weights}); onnx.checker: ok")
    if result.in_place_cache:
        print(f"note: in-place cache {result.in_place_cache}; decoding uses the standard step graph")
    copied = _copy_tokenizer(home, result.directory, args.tokenizer, convert=args.format in ("onnx", "optimum"))
    if args.format in ("onnx", "optimum") and (kept := _copy_kept(home, result.directory, args.format)):
        print(f"kept: {', '.join(kept)} (the checkpoint's processor and generation settings, which pipelines and "
              "`tfspec transcribe` read)")
    if args.format == "onnx" and copied:
        print(f"tokenizer: {', '.join(copied)} (translate reads and writes text)")
    elif args.format == "optimum":
        from tfspec.backends.onnx.hub import CONFIG

        task = _hub_task(spec, json.loads((result.directory / CONFIG).read_text(encoding="utf-8"))["architectures"][0])
        if copied or spec.patches is None:  # an image model reads no tokens
            print(f"tokenizer: {', '.join(copied)} (AutoTokenizer and transformers.js read them)" if copied else
                  "note: no tokenizer files beside the spec: optimum's ORTModel classes take token ids; "
                  "transformers.js's pipeline needs tokenizer.json")
        print(f"load: {_ORT_CLASSES[task]}.from_pretrained({str(result.directory)!r}) (optimum.onnxruntime), or "
              f"pipeline('{task}', {str(result.directory)!r}) (transformers.js)")
    elif args.format == "genai":
        print(f"tokenizer: {', '.join(copied)} (onnxruntime_genai.Tokenizer reads tokenizer.json and "
              "tokenizer_config.json)" if copied else "note: no tokenizer files beside the spec: "
              "onnxruntime_genai loads the model; feed token ids with Generator.append_tokens")
    if args.no_check:
        return 0
    if quant is not None:
        print(f"parity: the {quant.label} graphs against PyTorch holding the same {quant.label} weights (tolerance "
              "relative to each output's largest value), and against float32 (the quantisation error)")
    fed = {"genai": ", fed as onnxruntime-genai feeds it", "optimum": ", fed as optimum and transformers.js feed it"}
    print(f"parity with the PyTorch backend (onnxruntime CPU{fed.get(args.format, '')}):")
    for check in result.checks:
        print(f"  {check}")
    print("parity: ok" if result.ok else "parity: FAILED (the graphs were written; do not deploy them)")
    if result.int8 is not None:
        _print_int8(result.int8)
    return 0 if result.ok else 1


def _spec_of(args):
    """(spec, the directory whose tokenizer the export ships) of SPEC: a spec file, an imported
    directory, or a training run, whose weights (the average, else the newest checkpoint) and
    tokenizer are the defaults of --weights and --tokenizer (then None: a run's directory holds
    training tokenizers beside the one its model reads)."""
    from tfspec.cli.models import run_spec, run_weights
    from tfspec.data.codecs import TOKENIZER

    run = Path(args.spec)
    if not (run / "run.json").is_file() or (run / "spec.yaml").is_file():  # as load_spec reads a directory
        return load_spec(args.spec), resolve(args.spec).parent
    if args.format == "hf":
        raise TfspecError(f"{run}: a training run exports here to ONNX; for --format hf name the spec it trained and "
                          f"its weights (SPEC --weights {run}/average.safetensors)")
    spec, meta = run_spec(run)
    if not args.weights:
        args.weights = run_weights(run, None)
        print(f"weights: {args.weights} (the run's; --weights picks others)", file=sys.stderr)
    if args.tokenizer is None and args.format == "onnx" and (run / meta.get("tokenizer", TOKENIZER)).is_file():
        args.tokenizer = run / meta.get("tokenizer", TOKENIZER)
    return spec, None


def _shortlist(args, spec, home: Path | None):
    """``--shortlist CORPUS_DIR``: the shortlist (``tfspec.shortlist``) counted over the corpus's
    training pairs, read with the tokenizer the export ships (``--tokenizer`` or the spec's own)."""
    from tfspec.data import read_split
    from tfspec.data.corpus import load_manifest
    from tfspec.shortlist import build

    if spec.family != "encoder-decoder":
        raise TfspecError(f"--shortlist: {spec.name} does not translate sources (family {spec.family}); a shortlist "
                          "maps source tokens to target candidates")
    codec = shipped_codec(args.tokenizer, home, spec.vocab)
    if codec is None:
        raise TfspecError(f"--shortlist: {args.spec} has no tokenizer to read {args.shortlist} with; "
                          "give --tokenizer MODEL")
    corpus = load_manifest(args.shortlist)
    started, vocab = time.perf_counter(), spec.vocab
    train = read_split(args.shortlist, "train", corpus["src"], corpus["tgt"])
    pairs = ((codec.encode(s), codec.encode(t)) for s, t in train)
    shortlist = build(pairs, vocab.size, vocab.tgt_size, [*vocab.stop_ids, vocab.bos_id, vocab.unk_id],
                      args.shortlist_per_source, args.shortlist_frequent)
    print(f"shortlist: {shortlist.meta['pairs']} pairs of {args.shortlist}, {args.shortlist_per_source} candidates per "
          f"source token + {len(shortlist.always)} always ({time.perf_counter() - started:.1f}s)")
    return shortlist


def _print_int8(record: dict) -> None:
    line = f"int8: weights of every MatMul/Gemm quantised ({record['weights']}); float32 parity was checked first"
    if "greedy_tokens" in record:
        line += (f"; greedy tokens equal to float32 on the parity inputs: {record['greedy_tokens_equal']}/"
                 f"{record['greedy_tokens']} ({record['sentences_equal']}/{record['sentences']} sentences; random "
                 "weights flip easily: `tfspec evaluate RUN --backend onnx --int8` gives the BLEU difference)")
    if "generate_sentences" in record:
        line += ("; generate.onnx equal to the Python search over the int8 graphs: "
                 f"{record['generate_sentences_equal']}/{record['generate_sentences']} sentences")
    print(line)


def _check_replaceable(output: Path) -> None:
    """An export writes into a new or empty directory, or over an earlier export (tfspec's,
    onnxruntime-genai's or the Hugging Face layout's), never over files it did not write."""
    from tfspec.backends.onnx.hub import is_hub_export

    if output.is_dir() and not ((output / "tfspec.json").is_file() or (output / "genai_config.json").is_file()
                                or is_hub_export(output)):
        if any(not p.name.startswith(".") for p in output.iterdir()):
            raise TfspecError(f"{output}: not empty and not an earlier export; name a new or empty directory")


def _check_tokenizer(args, spec, home: Path | None) -> None:
    """``--tokenizer``: tfspec's sentencepiece model, for ONNX exports of specs without their own."""
    from tfspec.data.tokenizer import load_tokenizer
    from tfspec.data.tokenizer_json import tokenizer_json
    from tfspec.interop.hf.checkpoint import tokenizer_files

    if home is not None and (own := tokenizer_files(home)):
        raise TfspecError(f"--tokenizer: {args.spec} has its own tokenizer ({own[0].name}), which export copies")
    pieces, size = load_tokenizer(args.tokenizer).get_piece_size(), spec.vocab.size
    if pieces != size:
        raise TfspecError(f"--tokenizer: {args.tokenizer} has {pieces:,} pieces; {args.spec}'s vocabulary has {size:,}")
    tokenizer_json(Path(args.tokenizer))  # refused here, before exporting, if it cannot be converted


def _copy_kept(home: Path | None, output, form: str) -> list[str]:
    """Copy the checkpoint's JSON an import kept beside the spec (``KEPT``: its processor's and
    generation settings; an optimum export writes its generation config itself); the names copied."""
    from tfspec.interop.hf.checkpoint import GENERATION_CONFIG, KEPT

    names = [n for n in KEPT if home is not None and (home / n).is_file() and not (
        form == "optimum" and n == GENERATION_CONFIG)]
    for name in names:
        shutil.copyfile(home / name, Path(output) / name)
    return names


def _copy_tokenizer(home: Path | None, output, model: str | None = None, convert: bool = False) -> list[str]:
    """Copy the tokenizer files of ``home``, the spec's directory (an imported directory's), and
    ``model`` (``--tokenizer``) into an export, so ``tfspec translate`` and ``generate`` read and write
    text with the model's own tokenizer; with ``convert``, tfspec's own sentencepiece model gets
    its tokenizer.json, so JavaScript clients do too (docs/deploy-js.md)."""
    from tfspec.data.codecs import HF_TOKENIZER, TOKENIZER
    from tfspec.data.tokenizer import is_tfspec_tokenizer
    from tfspec.data.tokenizer_json import write_tokenizer_json
    from tfspec.interop.hf.checkpoint import tokenizer_files

    output = Path(output)
    files = tokenizer_files(home) if home is not None else []
    for path in files:
        shutil.copyfile(path, output / path.name)
    copied = [p.name for p in files]
    if model is not None:
        shutil.copyfile(model, output / TOKENIZER)
        copied.append(TOKENIZER)
    if convert and TOKENIZER in copied and HF_TOKENIZER not in copied and is_tfspec_tokenizer(output / TOKENIZER):
        try:
            copied.append(write_tokenizer_json(output / TOKENIZER, output / HF_TOKENIZER).name)
        except TfspecError as e:
            print(f"note: no {HF_TOKENIZER} for JavaScript clients: {e}", file=sys.stderr)
    return copied


def cmd_translate(args) -> int:
    from tfspec.backends.onnx import OnnxModel

    model = OnnxModel(args.model, device=args.device, threads=args.threads, cuda_graphs=not args.no_cuda_graphs)
    spec = model.spec
    print(f"{spec.name}: {model.describe()}", file=sys.stderr)
    codec = Codec(Path(args.model), spec)
    if args.shortlist and args.engine == "generate":
        raise TfspecError("--shortlist decodes with --engine search: generate.onnx scores the whole vocabulary")
    decoder = model.decoder(shortlist=args.shortlist) if args.engine == "search" else None
    limit = spec.positional.limit
    options = SearchOptions(beam=args.beam, alpha=args.alpha, max_extra=args.max_extra,
                            max_length=None if limit is None else limit - 1)
    lines = _read(args.input)
    sources = [codec.encode(line, number, limit) for number, line in enumerate(lines, 1)]
    started = time.perf_counter()
    from tqdm import tqdm

    with tqdm(total=sum(map(bool, sources)), unit="line", file=sys.stderr, dynamic_ncols=True,
              disable=None if len(sources) >= 64 else True) as bar:  # None: on a terminal only
        if args.engine == "generate":
            from tfspec.backends.onnx.runtime.generator import Generator, generate_all

            outputs = generate_all(Generator(model), sources, options, args.batch, spec.family == "decoder-only",
                                   args.batch_type, bar.update)
        else:
            outputs = decode_all(decoder, sources, options, args.batch, spec.family == "decoder-only",
                                 bar.update, args.batch_type)
    produced = sum(len(out) + 1 for out, src in zip(outputs, sources) if src)
    for out in outputs:
        print(codec.decode(out))
    elapsed = time.perf_counter() - started
    print(f"{len(lines)} lines, {produced} tokens in {elapsed:.2f}s ({produced / max(elapsed, 1e-9):.0f} tokens/s), "
          f"beam {args.beam}", file=sys.stderr)
    return 0


class Codec:
    """Lines <-> token ids: text through the model directory's tokenizer (``open_codec``:
    tfspec's sentencepiece model or an imported checkpoint's), else whitespace-separated ids."""

    def __init__(self, directory: Path, spec):
        self.vocab = spec.vocab
        self.text = open_codec(directory, spec.vocab)

    def encode(self, line: str, number: int, limit: int | None) -> list[int]:
        """Source ids (with EOS) of input line ``number``; empty lines give no ids."""
        if not line.strip():
            return []
        if len(line) > MAX_LINE:
            raise TfspecError(f"line {number}: {len(line):,} characters, more than the {MAX_LINE:,} a line may "
                              "have; split it into sentences")
        if self.text is not None:
            ids = self.text.encode(line)
        else:
            try:
                ids = [int(t) for t in line.split()]
            except ValueError:
                raise TfspecError(f"line {number}: expected token ids separated by spaces (this model directory "
                                  f"has no tokenizer), got {line.strip()[:40]!r}") from None
            bad = [t for t in ids if not 0 <= t < self.vocab.size]
            if bad:
                raise TfspecError(f"line {number}: token id {bad[0]} is outside the vocabulary (0..{self.vocab.size - 1})")
            ids.append(self.vocab.eos_id)
        if limit is not None and len(ids) > limit:
            print(f"warning: line {number}: {len(ids)} tokens, more than the model's {limit} positions; "
                  f"translating the first {limit}", file=sys.stderr)
            ids = ids[: limit - 1] + [self.vocab.eos_id]
        return ids

    def decode(self, ids: list[int]) -> str:
        return self.text.decode(ids) if self.text is not None else " ".join(map(str, ids))


def _read(source: str | None) -> list[str]:
    if source in (None, "-"):
        return sys.stdin.read().splitlines()
    try:
        return Path(source).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise TfspecError(f"{source}: no such input file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TfspecError(f"{source}: cannot read it as UTF-8 text ({e})") from None


def register(command) -> None:
    c = command("export", cmd_export,
                "Emit the model's ONNX graphs straight from the IR into DIR: model.onnx (full sequences), "
                "encoder.onnx and decoder.onnx (one decoding step with a KV cache), plus tfspec.json. Runs "
                "onnx.checker and a parity check against the PyTorch backend; exit status 1 if parity fails. "
                "--format hf writes config.json + model.safetensors for transformers' from_pretrained instead "
                "(GPT-2, BERT, Llama, Mistral or Qwen2), for specs that are exactly one of those, and "
                "checks them the same way when transformers is installed. --format genai writes model.onnx + "
                "genai_config.json (and the tokenizer files beside the spec) that onnxruntime-genai loads "
                "unchanged, for decoder-only specs with causal self-attention.")
    c.add_argument("spec", metavar="SPEC", help="a spec file or shipped name, a `tfspec import` directory, a "
                   "`tfspec train` run (its spec, its average.safetensors or newest checkpoint, its tokenizer), or a "
                   "Hugging Face checkpoint directory (config.json and weights: imported on the fly, weights streamed)")
    c.add_argument("-o", "--output", required=True, metavar="DIR", type=out_dir, help="directory to write (created if needed)")
    c.add_argument("--weights", metavar="CKPT", help="safetensors or PyTorch weights (default: SPEC/model.safetensors "
                   "when SPEC is a directory holding one, as `tfspec import` writes; else random init)")
    add_fields(c, ExportOptions, only=("format", "opset", "fp16", "int8", "int4", "int4_block", "int4_zero_points",
                                      "int4_embeddings", "int4_calibrate"))
    add_fields(c, ExportOptions, only=("stream", "static_cache", "generate", "fused"))
    c.add_argument("--shortlist", type=Path, metavar="CORPUS_DIR",
                   help="ONNX, encoder-decoders: also write shortlist.safetensors, the target tokens each source "
                        "token's translations use in CORPUS_DIR's training pairs (a `tfspec data fetch` or `prepare` "
                        "directory, read with the model's tokenizer), and decoder_shortlist.onnx, whose projection "
                        "and softmax cover only a batch's candidates: `translate --shortlist` (docs/decoding.md)")
    c.add_argument("--shortlist-per-source", type=integer(1, 100_000), default=50, metavar="N",
                   help="candidates kept per source token, by sentence pairs shared (default 50)")
    c.add_argument("--shortlist-frequent", type=integer(0, 100_000), default=500, metavar="K",
                   help="most frequent target tokens every batch allows (default 500)")
    c.add_argument("--seed", type=SEED, default=0, help="seed of the random weights without --weights")
    c.add_argument("--tokenizer", metavar="MODEL",
                   help="tfspec's sentencepiece model (a training run's tokenizer.model) to ship as "
                        "DIR/tokenizer.model, so translate reads and writes text, and as tokenizer.json, so "
                        "JavaScript clients do too (docs/deploy-js.md)")
    c.add_argument("--no-check", action="store_true", help="skip the parity check (onnxruntime or transformers)")
    c = command("translate", cmd_translate,
                "Read lines (token ids, or text when DIR has a sentencepiece tokenizer.model) from FILE or "
                "standard input and print one output line each. Empty lines stay empty; lines longer than the "
                "model's positions are cut with a warning. Output length is limited to input length + 50.")
    c.add_argument("model", metavar="DIR", help="a directory written by `tfspec export`")
    c.add_argument("input", nargs="?", metavar="FILE", help="input lines (default: standard input)")
    c.add_argument("--beam", type=BEAM, default=4, help="beam size; 1 is greedy (default 4)")
    c.add_argument("--alpha", type=ALPHA, default=0.6, help="GNMT length penalty (default 0.6)")
    c.add_argument("--max-extra", type=integer(0), default=50, help="output may exceed input length by this (default 50)")
    c.add_argument("--batch", type=integer(1, 2**24), default=32,
                   help="most sentences (or tokens, with --batch-type tokens) decoded together; lines are sorted "
                        "by length into batches and printed in input order (default 32)")
    c.add_argument("--batch-type", choices=["examples", "tokens"], default="examples",
                   help="what --batch counts: sentences, or source tokens including padding (default examples)")
    c.add_argument("--engine", choices=["search", "generate"], default="search",
                   help="search: tfspec's search in Python over the step graph (default); generate: generate.onnx "
                        "(`export --generate`), the same search inside one graph, with the same outputs")
    c.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto uses CUDA when onnxruntime really gets it (default)")
    c.add_argument("--threads", type=THREADS, help="onnxruntime threads (default: all cores)")
    c.add_argument("--shortlist", action="store_true",
                   help="score only the target tokens the export's shortlist allows for each batch's sources "
                        "(`export --shortlist`): a smaller output projection and softmax per step")
    c.add_argument("--no-cuda-graphs", action="store_true",
                   help="on CUDA, decode over the growing cache instead of replaying the static step graph "
                        "(written by `export --static-cache`) as CUDA graphs")
