"""``tfspec classify``: image files through an exported image classifier (ViT, DeiT, DINOv2), each
prepared as the checkpoint's own image processor prepares it (``tfspec.data.pixels``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tfspec.cli.types import POSITIVE, THREADS
from tfspec.errors import TfspecError


def cmd_classify(args) -> int:
    from tfspec.backends.onnx import OnnxModel
    from tfspec.data.pixels import Preprocessing, read_image

    model = OnnxModel(args.model, device="cpu", threads=args.threads)
    spec = model.spec
    if spec.patches is None or spec.head is None:
        raise TfspecError(f"{args.model}: not an image classifier (its spec {spec.name} has "
                          f"{'no patches input' if spec.patches is None else 'no classification head'})")
    prepare = Preprocessing.read(Path(args.model))
    labels = spec.head.labels or [f"LABEL_{i}" for i in range(spec.head.classes)]
    k = min(args.top_k, len(labels))
    for path in args.images:
        logits = model.run("model", ["logits"], {"pixel_values": prepare.batch([read_image(path)])})[0][0]
        scores = np.exp(logits - logits.max())
        scores /= scores.sum()
        best = np.argsort(-scores, kind="stable")[:k]
        found = [{"label": labels[i], "score": float(scores[i])} for i in best]
        if args.json:
            print(json.dumps({"image": str(path), "top": found}))
        else:
            print(f"{path}: " + ", ".join(f"{f['label']} {f['score']:.3f}" for f in found))
    return 0


def register(command) -> None:
    c = command("classify", cmd_classify,
                "Classify image files with an exported image classifier (`tfspec export` of a ViT, DeiT or "
                "DINOv2 checkpoint or spec): each image resized, cropped and normalised as the export's "
                "preprocessor_config.json says (the checkpoint's own, copied by the export), then the top labels "
                "with their softmax scores.")
    c.add_argument("images", nargs="+", metavar="IMAGE", help="image files (PNG, JPEG, ... anything Pillow reads)")
    c.add_argument("--model", required=True, metavar="DIR", help="a directory written by `tfspec export`")
    c.add_argument("--top-k", type=POSITIVE, default=5, metavar="K", help="labels shown per image (default 5)")
    c.add_argument("--threads", type=THREADS, default=None, help="onnxruntime intra-op threads (default: all cores)")
    c.add_argument("--json", action="store_true", help="one JSON object per image: {image, top: [{label, score}]}")
