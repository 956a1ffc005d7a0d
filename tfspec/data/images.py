"""Real images for the Image Transformer, from packages that install from the registry.

An image directory holds ``manifest.json`` and, per split, ``SPLIT.npy`` (N, H, W, C) uint8
intensities 0 .. levels - 1 and, for labelled sets, ``SPLIT-labels.npy`` (N,) int64. Arrays
are read with ``allow_pickle=False`` and checked against the manifest's shapes and sha256, so
a truncated, corrupt or foreign file is refused with its name instead of training on garbage.

Two sets, each held out so that test measures generalisation, not memory:

- ``digits``: scikit-learn's handwritten digits (UCI optdigits test set: 8x8, intensities
  0..16, labels 0..9). The file carries no writer ids but was written writer by writer, so
  train/valid/test are contiguous blocks (80/10/10%): shuffled rows would put every writer's
  hand in every split.
- ``photos``: scikit-image's bundled colour photographs cut into non-overlapping 32x32 RGB
  patches (256 levels). Whole photographs are held out: ``rocket`` is valid, ``chelsea`` and
  ``coffee`` are test; flat patches (std below 2 levels: black borders) are dropped.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from tfspec.errors import TfspecError
from tfspec import untrusted

SPLITS = ("train", "valid", "test")
DATASETS = ("digits", "photos")
KIND = "images"
PATCH = 32
PHOTOS = {"train": ("astronaut", "hubble_deep_field", "immunohistochemistry", "retina", "stereo_motorcycle"),
          "valid": ("rocket",), "test": ("chelsea", "coffee")}
"""skimage.data's colour photographs per split (stereo_motorcycle: its left view only)."""
FLAT = 2.0
"""Patches whose intensities vary less than this (std, levels) are background, not photograph."""


def _extra(module: str):
    """Import an optional package, or say which extra brings it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise TfspecError(f"{module.split('.')[0]} is not installed: install the images extra "
                          "(pip install 'tfspec[images]')") from None


def digit_blocks(n: int) -> list[tuple[int, int]]:
    """[start, stop) of the train, valid and test blocks of load_digits' ``n`` samples: 80/10/10%
    in file order (writer by writer), shared by the image digits and the CTC digit lines."""
    return [(n * a // 10, n * b // 10) for a, b in ((0, 8), (8, 9), (9, 10))]


def digits_splits() -> tuple[dict, dict]:
    """(arrays, info) of scikit-learn's digits: contiguous 80/10/10% blocks in file order."""
    bunch = _extra("sklearn.datasets").load_digits()
    pixels = bunch.images.astype(np.uint8)[..., None]  # (1797, 8, 8, 1), 0..16
    labels = bunch.target.astype(np.int64)
    cuts = dict(zip(SPLITS, digit_blocks(len(labels))))
    arrays = {s: (pixels[a:b], labels[a:b]) for s, (a, b) in cuts.items()}
    info = {"levels": 17, "classes": [str(k) for k in range(10)], "licence": "CC BY 4.0 (UCI optdigits)",
            "source": "sklearn.datasets.load_digits", "split": "contiguous blocks of the file (writer order)",
            "rows": {s: list(c) for s, c in cuts.items()}}
    return arrays, info


def photo_patches(image: np.ndarray, size: int = PATCH) -> np.ndarray:
    """Non-overlapping size x size RGB patches in raster order, flat ones dropped: (N, size, size, 3)."""
    rows, cols = image.shape[0] // size, image.shape[1] // size
    tiles = image[:rows * size, :cols * size, :3].reshape(rows, size, cols, size, 3).swapaxes(1, 2)
    tiles = tiles.reshape(rows * cols, size, size, 3)
    return tiles[tiles.reshape(len(tiles), -1).std(1) >= FLAT]


def photos_splits() -> tuple[dict, dict]:
    """(arrays, info) of skimage.data's colour photographs, whole photographs per split."""
    data = _extra("skimage.data")
    arrays, counts = {}, {}
    for split, names in PHOTOS.items():
        parts = []
        for name in names:
            image = getattr(data, name)()
            image = image[0] if isinstance(image, tuple) else image  # stereo_motorcycle: (left, right, disparity)
            parts.append(photo_patches(np.asarray(image, dtype=np.uint8)))
            counts[name] = len(parts[-1])
        arrays[split] = (np.concatenate(parts), None)
    info = {"levels": 256, "classes": None, "licence": "see skimage.data (public domain / CC0 / CC BY)",
            "source": "skimage.data", "split": "whole photographs", "photographs": PHOTOS, "patches": counts}
    return arrays, info


def prepare_images(name: str, out: str | Path) -> dict:
    """Write dataset ``name`` (digits or photos) into ``out``; return its manifest."""
    if name not in DATASETS:
        raise TfspecError(f"unknown image set {name!r}: choose one of {', '.join(DATASETS)}")
    arrays, info = digits_splits() if name == "digits" else photos_splits()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    first = arrays["train"][0]
    manifest = {"kind": KIND, "name": name, "height": first.shape[1], "width": first.shape[2],
                "channels": first.shape[3], **info, "splits": {}}
    for split, (pixels, labels) in arrays.items():
        entry = {"images": len(pixels), "files": {split + ".npy": _save(out / f"{split}.npy", pixels)}}
        if labels is not None:
            entry["files"][split + "-labels.npy"] = _save(out / f"{split}-labels.npy", labels)
        manifest["splits"][split] = entry
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out / "manifest.json")
    return manifest


def _save(path: Path, array: np.ndarray) -> str:
    np.save(path, array, allow_pickle=False)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def image_manifest(data_dir: str | Path) -> dict | None:
    """The manifest of an image directory; None when ``data_dir`` is not one (e.g. a text corpus)."""
    path = Path(data_dir) / "manifest.json"
    try:
        manifest = untrusted.read_json(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise TfspecError(f"{path}: unreadable ({str(e).splitlines()[0]})") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
        return None
    missing = {"name", "height", "width", "channels", "levels", "classes", "splits"} - set(manifest)
    if missing:
        raise TfspecError(f"{path}: image manifest lacks {', '.join(sorted(missing))}; rebuild it with "
                          "`tfspec data images`")
    if (why := _malformed(manifest)) is not None:
        raise TfspecError(f"{path}: corrupt image manifest ({why}); rebuild it with `tfspec data images`")
    return manifest


def _malformed(manifest: dict) -> str | None:
    """What in an image manifest has the wrong type, or None: it is data, read before any file."""
    if not isinstance(manifest["name"], str):
        return "'name' must be a string"
    for key in ("height", "width", "channels", "levels"):
        if not untrusted.whole(manifest[key]) or not 1 <= manifest[key] <= 2**16:
            return f"{key!r} must be a whole number from 1 to 65536"
    if manifest["classes"] is not None and not untrusted.names(manifest["classes"]):
        return "'classes' must be null or a list of names"
    def split_ok(entry) -> bool:
        return (isinstance(entry, dict) and untrusted.whole(entry.get("images")) and entry["images"] >= 0
                and isinstance(entry.get("files"), dict))
    if not isinstance(manifest["splits"], dict) or not all(map(split_ok, manifest["splits"].values())):
        return "'splits' must map split names to their image count and files"
    return None


def load_split(data_dir: str | Path, split: str) -> tuple[np.ndarray, np.ndarray | None, dict]:
    """(pixels (N, H, W, C) uint8, labels (N,) or None, manifest) of one split, checked."""
    manifest = image_manifest(data_dir)
    if manifest is None:
        raise TfspecError(f"{data_dir}: not an image directory (no manifest.json of kind images); make one with "
                          "`tfspec data images digits DIR`")
    if split not in manifest["splits"]:
        raise TfspecError(f"{data_dir}: no split {split!r} (has {', '.join(manifest['splits'])})")
    files = manifest["splits"][split]["files"]
    n = manifest["splits"][split]["images"]
    shape = (n, manifest["height"], manifest["width"], manifest["channels"])
    pixels = _load(Path(data_dir), f"{split}.npy", files, shape, np.uint8)
    if pixels.size and pixels.max() >= manifest["levels"]:
        raise TfspecError(f"{data_dir}/{split}.npy: intensity {pixels.max()} outside 0..{manifest['levels'] - 1}")
    labels = None
    if manifest["classes"]:
        labels = _load(Path(data_dir), f"{split}-labels.npy", files, (n,), np.int64)
        if labels.size and not 0 <= labels.min() <= labels.max() < len(manifest["classes"]):
            raise TfspecError(f"{data_dir}/{split}-labels.npy: labels outside 0..{len(manifest['classes']) - 1}")
    return pixels, labels, manifest


def _load(root: Path, name: str, files: dict, shape: tuple, dtype) -> np.ndarray:
    path = root / name
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TfspecError(f"{path}: missing; rebuild the directory with `tfspec data images`") from None
    if name not in files or hashlib.sha256(raw).hexdigest() != files[name]:
        raise TfspecError(f"{path}: sha256 differs from manifest.json (corrupt or replaced); rebuild it with "
                          "`tfspec data images`")
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise TfspecError(f"{path}: not a readable .npy array ({str(e).splitlines()[0]})") from None
    if array.shape != shape or array.dtype != dtype:
        raise TfspecError(f"{path}: {array.dtype}{list(array.shape)}, manifest.json says "
                          f"{np.dtype(dtype)}{list(shape)}")
    return array
