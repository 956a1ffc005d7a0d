"""``tfspec finetune PRETRAINED DATA -o RUN``: a pretrained encoder plus a new classification
head, trained on labelled text (``tfspec.data.labelled``) and scored on its held-out test split:
one label per text (a sequence_classification head, scored by accuracy) or one per word (a
token task: a token_classification head reading each word's first subword, scored by word
accuracy).

PRETRAINED is a ``tfspec train`` run of an encoder-only spec (masked LM; its averaged weights,
else its newest checkpoint, and its tokenizer), a directory made by ``tfspec import`` (an
imported BERT: ``model.safetensors`` and its tokenizer), or a spec, which starts from random
weights with a tokenizer trained on DATA. RUN receives ``spec.yaml`` (the spec with its head,
so ``tfspec export RUN --weights RUN/model.safetensors`` works), ``model.safetensors``,
``labels.json``, the tokenizer, ``metrics.jsonl``, ``checkpoints/`` and ``results.json``.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import yaml

from tfspec.cli.fields import add_fields, from_args
from tfspec.cli.types import THREADS, number, out_dir
from tfspec.data.codecs import HF_TOKENIZER, TOKENIZER, open_codec
from tfspec.data.corpus import SPLITS
from tfspec.data.labelled import TASKS, task_of
from tfspec.errors import TfspecError
from tfspec.spec import Spec, load_spec, spec_from_data
from tfspec.train_options import FinetuneConfig

TOKENIZERS = (HF_TOKENIZER, TOKENIZER)  # what open_codec reads, in its order (Marian's translate, not classify)


def pretrained(path: str, data: Path, run: Path) -> tuple[Spec, Path | None, Path]:
    """(spec, weights file or None for random weights, the directory of its tokenizer) of PRETRAINED."""
    from tfspec.cli.models import run_spec, run_weights

    directory = Path(path)
    if (directory / "run.json").is_file():
        spec, _ = run_spec(directory)
        weights = run_weights(directory, None)
    else:
        spec = load_spec(path)
        weights = directory / "model.safetensors" if directory.is_dir() else None
        if weights is not None and not weights.is_file():
            raise TfspecError(f"{directory}: no model.safetensors (a `tfspec import` directory holds one)")
    if spec.family != "encoder-only":
        raise TfspecError(f"{spec.name} is {spec.family}: fine-tuning adds a classification head to an encoder-only "
                          "spec (BERT-style)")
    source = directory if weights is not None else run
    if weights is None and not (run / TOKENIZER).is_file():
        from tfspec.data import train_tokenizer

        shutil.copyfile(train_tokenizer(data, spec.vocab.size, out_dir=run), run / TOKENIZER)
    if not any((source / name).is_file() for name in TOKENIZERS):
        raise TfspecError(f"{source}: no tokenizer ({' or '.join(TOKENIZERS)}) to turn text into ids")
    return spec, weights, source


def with_head(spec: Spec, task: str, labels: list[str], pooling: str | None, dropout: float | None) -> Spec:
    """``spec`` with a classification head naming ``labels`` in place of its masked-LM projection
    (or of the head it has): one label per text (``sequence``) or per position (``tokens``). A
    head of the same kind already there (an imported RobertaForSequenceClassification's) lends
    its shape, its dense layer and pooling, but not its weights."""
    kind = "token_classification" if task == "tokens" else "sequence_classification"
    shape = spec.head.model_dump(mode="json", include={"transform", "pooling"}, exclude_none=True) \
        if spec.head is not None and spec.head.kind == kind else {}
    if task == "tokens":
        if pooling:
            raise TfspecError(f"--pooling {pooling}: a token task labels every word, nothing is pooled")
        head, name = shape | {"kind": kind, "classes": len(labels), "dropout": dropout}, "tagger"
    else:
        head, name = shape | {"kind": kind, "classes": len(labels), "dropout": dropout} | (
            {"pooling": pooling} if pooling else {}), "classifier"
    head["labels"] = labels
    data = spec.model_dump(mode="json") | {"name": f"{spec.name}-{name}", "head_transform": False,
                                            "output_bias": False,
                                            "head": {k: v for k, v in head.items() if v is not None}}
    return spec_from_data(data, f"{spec.name} + head")


def cmd_finetune(args) -> int:
    import torch

    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import read_weights, save_weights
    from tfspec.backends.torch.finetune import accuracy, finetune, load_body
    from tfspec.backends.torch.training.tasks.classification import examples, read_splits

    data, run = Path(args.data), Path(args.out)
    task = args.task or task_of(data)
    splits, names, classes = read_splits(data, task)
    if args.threads:
        torch.set_num_threads(args.threads)
    run.mkdir(parents=True, exist_ok=True)
    spec, weights, tokenizer = pretrained(args.pretrained, data, run)
    codec = open_codec(tokenizer, spec.vocab)
    spec = with_head(spec, task, names, args.pooling, args.dropout)
    torch.manual_seed(args.seed)  # the new head's weights: --seed decides them, not whatever ran before
    model = build_module(spec)
    if weights is not None:
        unused = load_body(model, read_weights(weights), str(weights))
        print(f"body loaded from {weights}; head new ({len(names)} classes)"
              + (f"; not used: {', '.join(unused)}" if unused else ""), file=sys.stderr)
    limit = spec.positional.max_len if spec.positional.kind != "none" else 10**9
    encoded = {s: examples(codec, task, splits[s][0], classes[s], limit, data / f"{s}.txt") for s in SPLITS}
    config = from_args(FinetuneConfig, args)
    _write_setup(run, spec, names, args, tokenizer)
    started = time.perf_counter()
    state = finetune(model, encoded["train"], encoded["dev"], run, config, progress=not args.quiet,
                     log=lambda m: print(m, file=sys.stderr), resume=args.resume)
    save_weights(model, run / "model.safetensors")
    results = {"pretrained": str(args.pretrained), "task": task, "steps": state["step"], "epochs": state["epoch"],
               "train_seconds": round(time.perf_counter() - started, 1), "dev_accuracy": state["dev_accuracy"],
               "test_accuracy": accuracy(model, *encoded["test"]), "test_sentences": len(splits["test"][0])}
    if task == "tokens":
        results["test_words"] = sum(map(len, splits["test"][0]))
    if args.baseline:
        from tfspec.baseline import char_ngram_accuracy, word_char_ngram_accuracy

        started = time.perf_counter()
        fit = word_char_ngram_accuracy if task == "tokens" else char_ngram_accuracy
        results["baseline_test_accuracy"] = fit(splits["train"], splits["test"])
        results["baseline_seconds"] = round(time.perf_counter() - started, 1)
    (run / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    _print_results(results, spec, len(splits["train"][0]))
    return 0


def _write_setup(run: Path, spec: Spec, names: list[str], args, tokenizer: Path) -> None:
    """What RUN needs to be used later: the spec with its head, the labels, the tokenizer."""
    text = yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False, width=110)
    (run / "spec.yaml").write_text(f"# Written by `tfspec finetune {args.pretrained} {args.data}`.\n" + text,
                                   encoding="utf-8")
    (run / "labels.json").write_text(json.dumps(names, ensure_ascii=False) + "\n", encoding="utf-8")
    name = next(n for n in TOKENIZERS if (tokenizer / n).is_file())
    if tokenizer.resolve() != run.resolve():
        shutil.copyfile(tokenizer / name, run / name)


def _print_results(results: dict, spec: Spec, train: int) -> None:
    words = results.get("test_words")
    scored = f"test {'word ' if words else ''}accuracy ({words or results['test_sentences']:,} " \
             f"{'words' if words else 'texts'})"
    print(f"{spec.name}: {results['steps']:,} steps over {train:,} training texts in {results['train_seconds']:.0f}s")
    print(f"{scored}: {results['test_accuracy']:.4f}  fine-tuned model")
    if "baseline_test_accuracy" in results:
        print(f"{scored}: {results['baseline_test_accuracy']:.4f}  character 1-3-gram TF-IDF + logistic regression"
              f"{' on each word alone' if words else ''} ({results['baseline_seconds']:.0f}s)")


def register(command) -> None:
    c = command("finetune", cmd_finetune,
                "Fine-tune an encoder-only model to label texts or their words. PRETRAINED: a `tfspec train` run "
                "of an encoder-only spec (masked LM), a `tfspec import` directory (BERT), or a spec (random "
                "weights, tokenizer trained on DATA). DATA: {train,dev,test}.txt with aligned .labels files: one "
                "label per text (`tfspec data langid` writes them), or, for a token task, whitespace-separated "
                "words and one label per word (`tfspec data code-switch`). The body's weights are loaded by name "
                "(a missing or differently shaped one is refused), a sequence_classification or "
                "token_classification head is added with fresh weights (a token task labels each word's first "
                "subword), and the model is trained with AdamW, linear warm-up and decay (BERT's recipe); dev "
                "accuracy after each epoch, test accuracy (of texts, or of words) at the end, with --baseline a "
                "character n-gram classifier (of each word alone, for a token task) beside it.")
    c.add_argument("pretrained", metavar="PRETRAINED")
    c.add_argument("data", metavar="DATA")
    c.add_argument("-o", "--out", required=True, metavar="RUN", type=out_dir, help="run directory (new or empty)")
    c.add_argument("--task", choices=TASKS,
                   help="sequence: one label per text; tokens: one label per word (default: DATA/manifest.json's "
                        "task, else sequence)")
    c.add_argument("--pooling", choices=["first", "mean"],
                   help="sequence task: first: BERT's pooler on the first position (needs pooler: true); mean: the "
                        "mean of the outputs (default: first when the spec has a pooler, else mean)")
    c.add_argument("--dropout", type=number(0, 0.99), help="dropout before the classifier (default: the spec's)")
    add_fields(c, FinetuneConfig)
    c.add_argument("--resume", action="store_true",
                   help="continue RUN from its newest intact checkpoint (after Ctrl-C, SIGTERM or --max-minutes), "
                        "with the same PRETRAINED, DATA and options")
    c.add_argument("--baseline", action="store_true",
                   help="also fit the character n-gram baseline (scikit-learn) and print both test accuracies")
    c.add_argument("--threads", type=THREADS, help="torch CPU threads")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
