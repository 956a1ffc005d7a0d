"""``tfspec import`` and ``tfspec export --format hf``: published checkpoints in and out."""

from __future__ import annotations

import importlib.util
import sys

from tfspec.cli.types import out_dir
from tfspec.spec import load_spec, resolve


def cmd_import(args) -> int:
    from tfspec.interop.hf import import_checkpoint

    result = import_checkpoint(args.directory, args.output, name=args.name, architecture=args.architecture,
                               dtype=args.dtype, progress=not args.quiet)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.verbose:
        for reason, fields in _by_reason(result.ignored).items():
            print(f"ignored: {', '.join(fields)}: {reason}", file=sys.stderr)
    spec = result.spec
    print(f"{spec.name}: {result.architecture} -> {result.directory} ({', '.join(result.files)})")
    print(f"{spec.family}, {result.num_params:,} parameters" +
          ("" if "model.safetensors" in result.files else "; configuration only (no weights in the checkpoint)"))
    print(f"next: tfspec report {result.directory}" + ("" if "model.safetensors" not in result.files else
          f"; tfspec export {result.directory} --weights {result.directory}/model.safetensors -o DIR"))
    return 0


def _by_reason(ignored: dict[str, str]) -> dict[str, list[str]]:
    """Fields grouped under their reason, so that twenty generation settings make one line."""
    grouped: dict[str, list[str]] = {}
    for key, reason in ignored.items():
        grouped.setdefault(reason, []).append(key)
    return grouped


def export_hf(args) -> int:
    """The hf branch of ``tfspec export``: refuse a spec no family computes before building it."""
    from tfspec.backends.torch.checkpoint import weights_of
    from tfspec.cli.models import model_to_export
    from tfspec.interop.hf import export_checkpoint, fitting_family
    from tfspec.interop.hf.checkpoint import tokenizer_files

    spec = load_spec(args.spec)
    family = fitting_family(spec)
    model = model_to_export(spec, args)
    tokenizer = tokenizer_files(resolve(args.spec).parent)
    weights = {name: t.float().cpu().numpy() for name, t in weights_of(model).items()}
    architecture, files = export_checkpoint(spec, weights, args.output, "float16" if args.fp16 else "float32",
                                            tokenizer)
    print(f"{spec.name}: {family.title} as {architecture} -> {args.output} ({', '.join(files)})")
    if args.no_check:
        return 0
    if importlib.util.find_spec("transformers") is None:
        print("note: transformers is not installed: the checkpoint was not loaded back to check it", file=sys.stderr)
        return 0
    from tfspec.backends.torch.interop import check_hf

    checks = check_hf(model, args.output, architecture, family.outputs(architecture), 5e-2 if args.fp16 else 1e-4)
    print(f"parity with transformers {architecture}.from_pretrained (padded batch of 3):")
    for check in checks:
        print(f"  {check}")
    ok = all(c.ok for c in checks)
    print("parity: ok" if ok else "parity: FAILED (the checkpoint was written; do not publish it)")
    return 0 if ok else 1


def register(command) -> None:
    c = command("import", cmd_import,
                "Read a Hugging Face checkpoint directory (config.json; model.safetensors, its shards with "
                "model.safetensors.index.json, or pytorch_model.bin read with weights_only) and write "
                "OUT_DIR/spec.yaml, OUT_DIR/model.safetensors (tfspec parameter names, as export --weights and "
                "evaluate --checkpoint read) and the tokenizer files found. Families: bert, gpt2, llama, "
                "mistral, qwen2, marian, bart, t5. Every config "
                "field that changes the computation is mapped or refused by name; a directory with config.json alone gives the spec alone (for "
                "report and table1). OUT_DIR appears only when complete.")
    c.add_argument("directory", metavar="DIR", help="the checkpoint directory (what save_pretrained writes)")
    c.add_argument("-o", "--output", required=True, metavar="OUT_DIR", type=out_dir, help="directory to create (must not "
                   "exist, or be empty)")
    c.add_argument("--name", help="the spec's name (default: the published name, else DIR's name)")
    c.add_argument("--architecture", metavar="CLASS", help="the transformers class to import as, e.g. BertModel "
                   "(with the pooler) or BertForMaskedLM (with the masked-LM head); default: config.json's "
                   "architectures. Tensors of other heads are left out with a note")
    c.add_argument("--dtype", choices=["auto", "float32", "float16", "bfloat16"], default="auto",
                   help="dtype of the written weights (default auto: the checkpoint's own float type, so a bf16 "
                        "7B checkpoint stays 13 GiB instead of becoming a 27 GiB float32 copy; float32 where its "
                        "tensors mix types or are pickled)")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.add_argument("--verbose", action="store_true", help="also list the config.json fields read as not changing "
                   "the computation (bookkeeping, generation settings, fields transformers' class does not read), "
                   "each with why")
