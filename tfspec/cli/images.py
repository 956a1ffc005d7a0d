"""Images end to end: ``tfspec data images``, ``tfspec evaluate`` on an image run and
``tfspec sample`` (the Image Transformer, Parmar et al. 2018); ``tfspec train`` trains a spec with
an image through the ``images`` task (``backends/torch/training/tasks/images.py``).

``tfspec evaluate`` hands over here when the run's run.json says images.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from pathlib import Path

from tfspec.cli.tables import render
from tfspec.cli.types import SEED, THREADS, integer, number, out_file
from tfspec.data.images import DATASETS, load_split, prepare_images
from tfspec.errors import TfspecError

EXAMPLES = """\
examples:
  tfspec data images digits data/digits      # sklearn's 8x8 digits, 17 levels, labels 0..9
  tfspec data images photos data/photos      # skimage's colour photographs as 32x32 RGB patches
  tfspec train specs/zoo/image-digits.yaml --data data/digits --out runs/digits --max-minutes 8
"""


def cmd_data_images(args) -> int:
    started = time.perf_counter()
    manifest = prepare_images(args.name, args.dir)
    shape = f"{manifest['height']}x{manifest['width']}x{manifest['channels']}, {manifest['levels']} levels"
    print(f"{args.name} in {args.dir} ({shape}; split by {manifest['split']}; "
          f"{time.perf_counter() - started:.1f}s)")
    rows = [[s, f"{e['images']:,}", ", ".join(manifest["photographs"][s]) if "photographs" in manifest else ""]
            for s, e in manifest["splits"].items()]
    print(render(["split", "images", "photographs"], rows), end="")
    return 0


def register_data(action) -> None:
    """``tfspec data images NAME DIR`` (called by ``tfspec.cli.data``)."""
    a = action("images", cmd_data_images, "write real images (digits or photo patches) for the Image Transformer",
               textwrap.fill("Write an image directory for `tfspec train`: manifest.json and, per split (train, valid, test), "
               "SPLIT.npy (N, H, W, C) uint8 and SPLIT-labels.npy. digits: scikit-learn's 1,797 handwritten 8x8 "
               "digits (17 levels, labels 0..9), split into contiguous 80/10/10% blocks of the file (written "
               "writer by writer; it has no writer ids). photos: scikit-image's colour photographs cut into 32x32 RGB patches "
               "(256 levels), whole photographs held out (valid: rocket; test: chelsea, coffee). Needs the "
               "images extra: pip install 'tfspec[images]'.", 100) + "\n\n" + EXAMPLES)
    a.formatter_class = argparse.RawDescriptionHelpFormatter
    a.add_argument("name", choices=DATASETS, help="which images")
    a.add_argument("dir", metavar="DIR", help="directory to write (created if needed)")


SPLIT_NAMES = {"dev": "valid"}  # `tfspec evaluate --split dev` is the image directory's valid split


def cmd_evaluate(args, spec, meta: dict) -> int:
    """Bits/dim of the run (and of every --against run) on a split, beside the uniform and
    per-position histogram baselines fitted on train, in one table."""
    import numpy as np

    from tfspec.data.image_baselines import class_histogram_bits, histogram_bits, uniform_bits

    data, split = Path(args.data or meta["data"]), SPLIT_NAMES.get(args.split, args.split)
    pixels, labels, manifest = load_split(data, split)
    train, train_labels, _ = load_split(data, "train")
    if args.limit and args.limit < len(pixels):  # spread over the split: its photographs are stored one after another
        chosen = np.linspace(0, len(pixels) - 1, args.limit).round().astype(np.int64)
        pixels, labels = pixels[chosen], None if labels is None else labels[chosen]
    levels, conditional = manifest["levels"], labels is not None
    header = ["model", "parameters", "bits/dim p(x)"] + (["bits/dim p(x | class)"] if conditional else [])
    rows = [["uniform", "0", f"{uniform_bits(levels):.3f}"] + ([f"{uniform_bits(levels):.3f}"] if conditional else []),
            ["per-position histogram (train)", f"{pixels[0].size * levels:,}", f"{histogram_bits(train, pixels, levels):.3f}"]
            + ([f"{class_histogram_bits(train, train_labels, pixels, labels, levels):.3f}"] if conditional else [])]
    result = {"split": split, "images": len(pixels), "baselines": {r[0]: r[2:] for r in rows}, "models": {}}
    for run in [Path(args.run), *map(Path, args.against or [])]:
        name, params, bits = _model_bits(run, args, manifest, pixels, labels)
        rows.append([name, f"{params:,}", *(f"{b:.3f}" for b in bits)])
        result["models"][str(run)] = {"spec": name, "parameters": params, "bits_per_dim": bits}
    print(f"{manifest['name']} {split} split: {len(pixels):,} images, {pixels[0].size} intensities each, "
          f"{levels} levels (bits/dim = nll nats / ln 2 per intensity)")
    print(render(header, rows), end="")
    out = Path(args.run) / "eval"
    out.mkdir(exist_ok=True)
    (out / f"{split}.images.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


def _model_bits(run: Path, args, manifest, pixels, labels) -> tuple[str, int, list[float]]:
    """(spec name, parameters, [bits/dim after bos, after the class token if labelled])."""
    from tqdm import tqdm

    from tfspec.backends.torch.images import bits_per_dim, check_image, prefix_ids

    spec, _, model = _load_model(run, args)
    check_image(spec, manifest)
    classes = len(manifest["classes"] or [])
    prefixes = [prefix_ids(spec, None, classes, len(pixels))] + ([prefix_ids(spec, labels, classes)] if classes else [])
    bits = []
    with tqdm(total=len(pixels) * len(prefixes), unit="image", file=sys.stderr,
              disable=True if args.quiet else None) as bar:
        for prefix in prefixes:
            bits.append(bits_per_dim(model, pixels, prefix, args.batch, bar.update))
    return spec.name, sum(p.numel() for p in model.parameters()), bits


def _load_model(run: Path, args):
    """(spec, run.json, model with the run's chosen weights on --device) of an image run."""
    import torch

    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.training.checkpoint import load_any_weights
    from tfspec.cli.models import run_spec, run_weights, torch_device

    spec, meta = run_spec(run)
    if "images" not in meta:
        raise TfspecError(f"{run}: not an image run (trained on {meta.get('data', '?')}); train one on a directory "
                          "from `tfspec data images`")
    if args.threads:
        torch.set_num_threads(args.threads)
    model = build_module(spec)
    load_any_weights(model, run_weights(run, args.checkpoint if run == Path(args.run) else None))
    return spec, meta, model.to(torch_device(args.device)).eval()


def cmd_sample(args) -> int:
    """Sample images from an image run and write them as a PNG grid (and the intensities as .npy)."""
    import numpy as np
    from tqdm import tqdm

    from tfspec.backends.torch.images import sample_images
    from tfspec.data.grid import save_grid

    spec, meta, model = _load_model(Path(args.run), args)
    classes = meta.get("classes") or []
    prefix, columns = _prefixes(spec, classes, args.class_, args.count)
    started = time.perf_counter()
    with tqdm(total=spec.image.positions, unit="intensity", file=sys.stderr,
              disable=True if args.quiet else None) as bar:
        images = sample_images(model, prefix, args.temperature, args.seed, bar.update)
    zoom = args.zoom or max(1, 32 // spec.image.height)
    save_grid(args.output, images, columns, spec.image.levels, zoom)
    np.save(args.output.with_suffix(".npy"), images.astype(np.uint8), allow_pickle=False)
    print(f"{len(images)} images ({spec.image.height}x{spec.image.width}x{spec.image.channels}, temperature "
          f"{args.temperature:g}, seed {args.seed}) in {time.perf_counter() - started:.1f}s -> {args.output} "
          f"(intensities: {args.output.with_suffix('.npy')})")
    return 0


def _prefixes(spec, classes: list[str], chosen: str | None, count: int):
    """(prefix token per image, grid columns): one row per class and one unconditional row
    (``all``, the default for labelled runs), one class, or unconditional (``none``)."""
    import numpy as np

    from tfspec.backends.torch.images import prefix_ids

    chosen = chosen or ("all" if classes else "none")
    if chosen == "none":
        return prefix_ids(spec, None, len(classes), count), min(count, 8)
    if not classes:
        raise TfspecError(f"--class {chosen}: this run's images have no classes; use --class none")
    if chosen == "all":
        labels = np.repeat(np.arange(len(classes)), count)
        return np.concatenate([prefix_ids(spec, labels, len(classes)),
                               prefix_ids(spec, None, len(classes), count)]), count
    if chosen not in classes:
        raise TfspecError(f"--class {chosen}: not a class of this run ({', '.join(classes)}, all or none)")
    return prefix_ids(spec, np.full(count, classes.index(chosen)), len(classes)), min(count, 8)


def add_evaluate_options(c) -> None:
    """Options of ``tfspec evaluate`` that only image runs use."""
    c.add_argument("--against", action="append", metavar="RUN",
                   help="image runs: also score this run (e.g. the full-attention model) in the same table")


def register(command) -> None:
    c = command("sample", cmd_sample,
                "Autoregressive sampling from a run trained on `tfspec data images`: each intensity drawn from "
                "the model's softmax over the levels (divided by --temperature; 0 takes the most likely), "
                "one token per step through the KV cache. For class-labelled runs (digits) the grid has one "
                "row per class and a last unconditional row, unless --class picks one class or none. The "
                "intensities are also written beside the PNG as .npy.")
    c.add_argument("run", metavar="RUN")
    c.add_argument("-o", "--output", required=True, type=out_file, help="PNG file to write")
    c.add_argument("--class", dest="class_", metavar="K", help="a class name (digits: 0..9), all or none")
    c.add_argument("--count", type=integer(1, 4096), default=8, help="images per class row, or in all (default 8)")
    c.add_argument("--temperature", type=number(0, 100), default=1.0, help="softmax temperature (default 1)")
    c.add_argument("--seed", type=SEED, default=0)
    c.add_argument("--zoom", type=integer(1, 64), help="pixels per intensity in the PNG (default: 32 / height, at least 1)")
    c.add_argument("--checkpoint", metavar="PATH", help="a checkpoint directory or weights file")
    c.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    c.add_argument("--threads", type=THREADS, help="torch CPU threads")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
