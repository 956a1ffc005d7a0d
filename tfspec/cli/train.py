"""``tfspec train``, ``tfspec average`` and ``tfspec evaluate``: from a spec and a corpus to a
BLEU score, with the paper's recipe (§5, §6.1).

A run directory holds ``run.json`` (spec, options, data), ``tokenizer.model``,
``metrics.jsonl``, ``checkpoints/step-*`` and, after ``average``, ``average.safetensors``.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from tfspec.cli import ctc, images
from tfspec.cli.models import run_spec, run_weights, torch_device
from tfspec.cli.fields import add_fields, from_args
from tfspec.cli.types import ALPHA, BEAM, POSITIVE, THREADS, integer, out_dir
from tfspec.data.codecs import TOKENIZER
from tfspec.errors import TfspecError
from tfspec.spec import load_spec
from tfspec.train_options import TrainConfig
from tfspec.untrusted import read_json

TRAIN_FLAGS = ("steps", "batch_tokens", "accum", "shard", "checkpoint_activations", "compile", "warmup", "lr_scale",
               "seed", "save_every", "keep", "log_every", "max_minutes", "sharded")
"""The fields of ``TrainConfig`` that are ``tfspec train``'s flags, in its help's order (``clip``:
the paper does not clip, and no task on token sequences asks to)."""


def cmd_train(args) -> int:
    """Train the task the spec asks for (its family, image, frames and head; ``--task`` to name
    one) on --data, read by that task: a directory that does not fit it is refused."""
    import torch

    from tfspec.backends.torch.training.process import write_config
    from tfspec.backends.torch.training.tasks import task_for
    from tfspec.backends.torch.training.trainer import Trainer

    spec = load_spec(args.spec)
    task = task_for(spec, args.task)
    if task.command != "train":
        raise TfspecError(f"{spec.name} is trained by the {task.name} task: `tfspec {task.command}` runs it")
    if args.threads:
        torch.set_num_threads(args.threads)
    run, data = Path(args.out), Path(args.data) if args.data else None
    if task.name == "ctc":  # two objectives (CTC and its framewise baseline), an export and a CER table
        return ctc.train_on_lines(spec, args, data)
    device = torch_device(args.device)
    config = train_config(args)
    prepared = task.read(spec, config, data, run, src=args.src, tgt=args.tgt)
    write_config(run, spec, config, prepared.record)
    print(prepared.describe(device), file=sys.stderr)
    last = Trainer(prepared, run, device, not args.quiet, lambda m: print(m, file=sys.stderr)).fit(args.resume)
    if last:
        print(prepared.summary(last, run))
    return 0


def train_config(args) -> TrainConfig:
    """The options of ``tfspec train`` for the tasks on token sequences (text and images):
    --steps left out is 1000, or 100000 when --max-minutes is what ends the run."""
    return from_args(TrainConfig, args, **({"steps": 100_000} if args.steps is None and args.max_minutes else {}))


def cmd_average(args) -> int:
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.training import checkpoint

    run = Path(args.run)
    spec, _ = run_spec(run)
    found = checkpoint.checkpoints(run)
    if len(found) < args.last:
        raise TfspecError(f"{run}: {len(found)} checkpoints, fewer than --last {args.last} (keep more with "
                          "`tfspec train --keep`)")
    chosen = found[-args.last:]
    checkpoint.average(chosen, build_module(spec), run / "average.safetensors")
    print(f"averaged {', '.join(p.name for p in chosen)} -> {run / 'average.safetensors'}")
    return 0


def cmd_evaluate(args) -> int:
    import torch

    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.training.checkpoint import load_any_weights
    from tfspec.data import load_tokenizer, read_split
    from tfspec.search import SearchOptions

    run = Path(args.run)
    spec, meta = run_spec(run)
    if "images" in meta:
        return images.cmd_evaluate(args, spec, meta)
    if "objectives" in meta:  # trained on lines of frames
        return ctc.evaluate_run(args, spec, meta)
    if spec.family == "encoder-only":
        raise TfspecError(f"{spec.name} is encoder-only: it has no decoder to translate with, so there is nothing "
                          "for BLEU to score (its masked-LM loss is in the run's metrics.jsonl)")
    if args.threads:
        torch.set_num_threads(args.threads)
    weights = run_weights(run, args.checkpoint)
    model = build_module(spec)
    load_any_weights(model, weights)
    tokenizer = load_tokenizer(run / meta.get("tokenizer", TOKENIZER))
    pairs = read_split(Path(args.data or meta["data"]), args.split, meta["src"], meta["tgt"])
    if args.limit:
        pairs = pairs[: args.limit]
    limit = spec.positional.max_len if spec.positional.kind != "none" else None
    sources = [ids[: (limit or 10**9) - 1] + [spec.vocab.eos_id] for ids in tokenizer.encode([s for s, _ in pairs])]
    if args.int8 and args.backend != "onnx":
        raise TfspecError("--int8 evaluates int8 onnxruntime graphs: add --backend onnx")
    engines = {"torch": lambda: _torch_decoder(model, args.device)}
    engines["onnx"] = lambda: _onnx_decoder(model, run, weights, args.device)
    engines["onnx-int8"] = lambda: _onnx_decoder(model, run, weights, args.device, int8=True)
    chosen = ["onnx", "onnx-int8"] if args.int8 else [args.backend]
    options = SearchOptions(beam=args.beam, alpha=args.alpha, max_extra=args.max_extra,
                            max_length=None if limit is None else limit - 1)
    results = {}
    for name in chosen:
        decoder, where, export_dir = engines[name]()
        results[name] = result = _evaluate(decoder, sources, pairs, tokenizer, options, spec, args, name, weights)
        print(f"{spec.name} on {args.split} ({result['sentences']} sentences, {where}, beam {args.beam}): "
              f"BLEU {result['bleu']:.2f}, chrF {result['chrf']:.2f}")
        print(f"  {result['bleu_signature']}\n  {result['chrf_signature']}")
    if args.int8:
        _record_int8_bleu(export_dir, results["onnx"], results["onnx-int8"], args.split)
    return 0


def _evaluate(decoder, sources, pairs, tokenizer, options, spec, args, backend: str, weights: Path) -> dict:
    """Decode every source, score against the references, and keep hypotheses and scores in RUN/eval."""
    from tqdm import tqdm

    from tfspec.evaluate import decode_all, score

    started = time.perf_counter()
    with tqdm(total=len(sources), unit="sent", file=sys.stderr, disable=True if args.quiet else None) as bar:
        outputs = decode_all(decoder, sources, options, args.batch, spec.family == "decoder-only", bar.update)
    hypotheses = tokenizer.decode(outputs)
    result = score(hypotheses, [t for _, t in pairs])
    result |= {"split": args.split, "backend": backend, "weights": str(weights), "beam": args.beam,
               "alpha": args.alpha, "seconds": round(time.perf_counter() - started, 1)}
    out = Path(args.run) / "eval"
    out.mkdir(exist_ok=True)
    (out / f"{args.split}.{backend}.hyp").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    (out / f"{args.split}.{backend}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def _record_int8_bleu(export_dir: Path, fp32: dict, int8: dict, split: str) -> None:
    """Print the int8 graphs' BLEU against float32's and keep it in their manifest."""
    difference = round(int8["bleu"] - fp32["bleu"], 2)
    print(f"int8 vs float32 on {split}: BLEU {int8['bleu']:.2f} vs {fp32['bleu']:.2f} ({difference:+.2f}), "
          f"chrF {int8['chrf']:.2f} vs {fp32['chrf']:.2f}; recorded in {export_dir / 'tfspec.json'}")
    from tfspec.backends.onnx.exporter import write_manifest
    from tfspec.backends.onnx.runtime import read_manifest

    manifest = read_manifest(export_dir)
    manifest["int8"]["bleu"] = {"split": split, "sentences": int8["sentences"], "float32": fp32["bleu"],
                                "int8": int8["bleu"], "difference": difference, "signature": int8["bleu_signature"]}
    write_manifest(export_dir, manifest)


def _torch_decoder(model, device: str):
    """The KV-cached PyTorch decoder on ``device``: (decoder, where, no export directory)."""
    from tfspec.backends.torch import TorchDecoder

    device = torch_device(device)
    return TorchDecoder(model.to(device)), f"PyTorch ({device.type.upper()})", None


def _onnx_decoder(model, run: Path, weights: Path, device: str, int8: bool = False):
    """Export (once per weights file) and decode with onnxruntime: (decoder, where, directory)."""
    from tfspec.backends.onnx import OnnxModel, export
    from tfspec.backends.onnx.runtime import providers

    name = weights.parent.name if weights.name == "model.safetensors" else weights.stem
    target = run / "onnx" / (name + ("-int8" if int8 else ""))
    static = providers(device)[0] == "CUDAExecutionProvider"  # CUDA replays the static step as a CUDA graph
    if _stale(target / "tfspec.json", weights, static):
        result = export(model, target, int8=int8, static_cache=static)
        if not result.ok:
            raise TfspecError(f"{target}: ONNX parity check failed: {[str(c) for c in result.checks if not c.ok]}")
    shutil.copyfile(run / TOKENIZER, target / TOKENIZER)
    onnx_model = OnnxModel(target, device=device)
    return onnx_model.decoder(), onnx_model.describe() + (", int8" if int8 else ""), target


def _stale(manifest: Path, weights: Path, static: bool = False) -> bool:
    """Whether a run's cached export must be written again: missing, older than the weights,
    in another export format than this tfspec reads, or without the static step graph wanted."""
    from tfspec.backends.onnx.runtime import FORMAT

    if not manifest.is_file() or manifest.stat().st_mtime < weights.stat().st_mtime:
        return True
    try:
        found = read_json(manifest)
        return found.get("format") != FORMAT or (static and "decoder_static" not in found.get("graphs", {}))
    except (OSError, ValueError, AttributeError, TypeError):
        return True


def register(command) -> None:
    c = command("train", cmd_train,
                "Train with §5 of the paper: length-grouped batches of --batch-tokens tokens, Adam (0.9, 0.98, "
                "1e-9), the warm-up / inverse-square-root rate of eq. 3, dropout and label smoothing from the spec. "
                "The spec says the task (--task names one where it fits several) and the task what --data must "
                "hold: encoder-decoder specs learn to translate SRC to TGT (translation), decoder-only specs to "
                "continue TGT text (language-model), encoder-only specs (BERT) to predict masked SRC tokens "
                "(masked-lm; 15%: 80% [MASK], 10% random, 10% kept), each on a corpus for which a shared "
                "sentencepiece model of the spec's vocabulary size is trained first. A decoder-only spec with an "
                "image learns its intensities from a `tfspec data images` directory (images, in bits/dim). A spec "
                "with frames and a ctc head (examples/ctc-digits.yaml) is trained on a `tfspec data digit-lines` "
                "directory with CTC and, beside it, the same spec on per-frame labels (the baseline), each for "
                "--steps (default 4000) steps of 16 lines within half of --max-minutes "
                "(RUN/ctc, RUN/framewise; --resume continues both); both are scored by character error rate on "
                "the dev and test lines and the CTC model is exported to RUN/onnx. A directory the task does not "
                "read is refused. "
                "Checkpoints go to RUN/checkpoints (Ctrl-C saves one); --resume continues exactly. Under torchrun "
                "(`torchrun --nproc_per_node=K -m tfspec train ...`) each process takes its share of every step.")
    c.add_argument("spec", metavar="SPEC")
    c.add_argument("--data", metavar="DIR", help="what the task reads: a corpus from `tfspec data fetch/prepare` "
                   "(default: the built-in sample), an image directory (`tfspec data images`) or digit lines "
                   "(`tfspec data digit-lines`)")
    c.add_argument("--task", metavar="NAME",
                   help="the task to train, where the spec fits several (default: the one it fits: translation, "
                        "language-model, masked-lm, images or ctc)")
    c.add_argument("--out", required=True, metavar="RUN", type=out_dir, help="run directory")
    c.add_argument("--src", default="en", help="source language suffix (default en)")
    c.add_argument("--tgt", default="de", help="target language suffix (default de)")
    add_fields(c, TrainConfig, only=TRAIN_FLAGS, flags={"sharded": "--sharded-checkpoints"},
               defaults={"steps": "1000; 100000 with --max-minutes, which then ends the run",
                         "warmup": "4000; 400 on digit lines"})
    c.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    c.add_argument("--threads", type=THREADS, help="torch CPU threads")
    c.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in RUN (either format, "
                   "at any number of processes)")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c = command("average", cmd_average)
    c.add_argument("run", metavar="RUN")
    c.add_argument("--last", type=integer(1, 10**6), default=5, help="how many (default 5; the paper: 5 base, 20 big)")
    c = command("evaluate", cmd_evaluate,
                "Beam search (beam 4, alpha 0.6, max length source + 50, §6.1) with the run's averaged weights "
                "(else its newest checkpoint), detokenised, scored with sacrebleu BLEU and chrF. --backend onnx "
                "exports the weights and decodes with onnxruntime: the same search, the same tokens. On an image run "
                "it prints bits/dim beside baselines; on a run trained on digit lines, the character error rate of "
                "its CTC model and framewise baseline.")
    c.add_argument("run", metavar="RUN")
    c.add_argument("--split", default="test", choices=["dev", "test", "train"])
    c.add_argument("--data", metavar="DIR", help="corpus directory (default: the one the run trained on)")
    c.add_argument("--checkpoint", metavar="PATH", help="a checkpoint directory or weights file")
    c.add_argument("--backend", choices=["torch", "onnx"], default="torch")
    c.add_argument("--int8", action="store_true",
                   help="with --backend onnx: also export int8 graphs, decode with both and print (and record in "
                        "their tfspec.json) the BLEU difference")
    c.add_argument("--beam", type=BEAM, default=4)
    c.add_argument("--alpha", type=ALPHA, default=0.6)
    c.add_argument("--max-extra", type=integer(0), default=50)
    c.add_argument("--batch", type=integer(1, 65536), default=32, help="sentences per batch (default 32)")
    c.add_argument("--limit", type=POSITIVE, help="only the first N sentences (digit lines: the first N lines; "
                                                  "images: N spread evenly over the split)")
    c.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="where to decode (auto: CUDA when torch, or with --backend onnx onnxruntime, has it)")
    c.add_argument("--threads", type=THREADS, help="torch CPU threads")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    images.add_evaluate_options(c)
