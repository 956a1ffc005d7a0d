"""Lines of handwritten digits for CTC: scikit-learn's 8x8 digits (``load_digits``: 1,797
images, 16 grey levels, the test part of the UCI optdigits set) composed side by side.

Each line holds 3-8 digits, each stretched or squeezed horizontally (0.7-1.6x its width),
with 0-3 empty columns between digits and 0-4 at either end. The line's columns are its
frames: 8 intensities each, scaled to [0, 1], top row first.

Held-out writers: load_digits carries no writer ids. The samples are split in contiguous
blocks, the first 80% for training lines, the next 10% for dev lines (choosing a spec or a
budget) and the last 10% for test lines, never a shuffled split: the UCI file stores forms one
after another, so a block keeps most writers' digits on one side, and no dev or test digit
image ever occurs in a training line.

A directory holds ``manifest.json`` (kind ``digit-lines``), per split ``SPLIT.npz`` (frames
(total, 8) float32, lengths (lines,), frame_positions (total,): which digit of its line each
column was drawn from, -1 in gaps) and ``SPLIT.txt`` (one digit string a line), and ``samples/`` with a few test
lines as PNG (ink bright, as in load_digits) for ``tfspec transcribe``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfspec.data.images import digit_blocks
from tfspec.errors import TfspecError
from tfspec.untrusted import read_json

KIND = "digit-lines"
ALPHABET = "0123456789"
FEATURES = 8
SPLITS = ("train", "dev", "test")
"""The splits, drawing in order on the blocks of ``images.digit_blocks`` (the image digits' own)."""


@dataclass(frozen=True)
class Line:
    frames: np.ndarray
    """float32 (columns, 8) in [0, 1]."""
    text: str
    frame_positions: np.ndarray
    """int8 (columns,): which character of ``text`` each column was drawn from, -1 between."""


def stretch(image: np.ndarray, width: int) -> np.ndarray:
    """An (8, w) image resampled to ``width`` columns by linear interpolation between columns."""
    source = (np.arange(width) + 0.5) * image.shape[1] / width - 0.5
    return np.stack([np.interp(source, np.arange(image.shape[1]), row) for row in image])


def compose(images: np.ndarray, digits: np.ndarray, rng: np.random.Generator) -> Line:
    """One line of 3-8 randomly chosen digit images, each at a random width and spacing."""
    chosen = rng.integers(0, len(images), rng.integers(3, 9))
    parts, labels = [], []

    def put(columns: np.ndarray, digit: int) -> None:
        parts.append(columns)
        labels.append(np.full(columns.shape[1], digit))

    put(np.zeros((8, rng.integers(0, 5))), -1)
    for n, i in enumerate(chosen):
        if n:
            put(np.zeros((8, rng.integers(0, 4))), -1)
        put(stretch(images[i], max(4, round(8 * rng.uniform(0.7, 1.6)))), n)
    put(np.zeros((8, rng.integers(0, 5))), -1)
    frames = (np.concatenate(parts, axis=1).T / 16.0).astype(np.float32)
    text = "".join(str(digits[i]) for i in chosen)
    return Line(frames, text, np.concatenate(labels).astype(np.int8))


def write_digit_lines(directory: str | Path, train: int = 12000, dev: int = 500, test: int = 500, seed: int = 0,
                      samples: int = 5) -> dict:
    """Compose ``train``, ``dev`` and ``test`` lines from the three blocks of load_digits into
    ``directory``; return the manifest written."""
    try:
        from sklearn.datasets import load_digits
        import PIL  # noqa: F401  (the sample PNGs)
    except ImportError as e:
        raise TfspecError(f"digit lines need scikit-learn and pillow ({e.name} is missing): pip install "
                          "'tfspec[images]'") from None
    data = load_digits()
    total = len(data.images)
    blocks = {split: (slice(*cut), count)
              for split, cut, count in zip(SPLITS, digit_blocks(total), (train, dev, test))}
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {"kind": KIND, "features": FEATURES, "alphabet": ALPHABET, "seed": seed,
                "source": "sklearn.datasets.load_digits (UCI optdigits test part, 1,797 images)",
                "held_out": ", ".join(f"samples [{b.start}, {b.stop}) draw {split} lines"
                                      for split, (b, _) in blocks.items()),
                "splits": {}}
    for split, (block, count) in blocks.items():
        rng = np.random.default_rng([seed, len(manifest["splits"])])
        lines = [compose(data.images[block], data.target[block], rng) for _ in range(count)]
        np.savez(directory / f"{split}.npz", frames=np.concatenate([x.frames for x in lines]),
                 lengths=np.array([len(x.frames) for x in lines], dtype=np.int64),
                 frame_positions=np.concatenate([x.frame_positions for x in lines]))
        (directory / f"{split}.txt").write_text("".join(x.text + "\n" for x in lines), encoding="utf-8")
        manifest["splits"][split] = {"lines": count, "digits": sum(len(x.text) for x in lines),
                                     "frames": sum(len(x.frames) for x in lines)}
        if split == "test":
            _write_samples(directory / "samples", lines[:samples])
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def _write_samples(directory: Path, lines: list[Line]) -> None:
    """Test lines as 8-pixel-high greyscale PNGs named after their text (transcribe's input)."""
    from PIL import Image

    directory.mkdir(exist_ok=True)
    for n, line in enumerate(lines):
        pixels = np.round(line.frames.T * 255).astype(np.uint8)
        Image.fromarray(pixels, mode="L").save(directory / f"test-{n:03d}-{line.text}.png")


def read_manifest(directory: str | Path) -> dict | None:
    """The manifest of a digit-lines directory, or None when ``directory`` holds something else."""
    path = Path(directory) / "manifest.json"
    try:
        manifest = read_json(path)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("kind") == KIND else None


def read_digit_lines(directory: str | Path, split: str) -> list[Line]:
    """The lines of one split, checked for consistent sizes (never unpickled)."""
    directory = Path(directory)
    path = directory / f"{split}.npz"
    try:
        with np.load(path, allow_pickle=False) as arrays:
            frames, lengths, positions = arrays["frames"], arrays["lengths"], arrays["frame_positions"]
        texts = (directory / f"{split}.txt").read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError, KeyError, UnicodeDecodeError) as e:
        raise TfspecError(f"{path}: cannot read the {split} lines ({str(e).splitlines()[0][:200]}); rewrite them "
                          "with `tfspec data digit-lines`") from None
    if (frames.ndim != 2 or frames.shape[1] != FEATURES or lengths.ndim != 1 or len(lengths) != len(texts)
            or (lengths < 1).any() or int(lengths.sum()) != len(frames) or positions.shape != frames.shape[:1]):
        raise TfspecError(f"{path}: frames, lengths, frame_positions and {split}.txt do not fit together; rewrite "
                          "them with `tfspec data digit-lines`")
    ends = np.cumsum(lengths)
    return [Line(frames[e - n:e], text, positions[e - n:e]) for n, e, text in zip(lengths, ends, texts)]
