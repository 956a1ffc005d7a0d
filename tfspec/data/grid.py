"""A grid of images as one PNG (Pillow), for looking at samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def to_bytes(images: np.ndarray, levels: int) -> np.ndarray:
    """Intensities 0 .. levels - 1 -> 0 .. 255 (round(v * 255 / (levels - 1))), uint8."""
    return np.rint(images.astype(np.float64) * 255 / (levels - 1)).astype(np.uint8)


def grid(images: np.ndarray, columns: int, levels: int, zoom: int = 1, gap: int = 1) -> np.ndarray:
    """(N, H, W, C) intensities -> one (rows x columns) uint8 canvas with ``gap`` white pixels
    between cells, each cell enlarged ``zoom`` times (nearest neighbour)."""
    n, h, w, c = images.shape
    cells = to_bytes(images, levels).repeat(zoom, 1).repeat(zoom, 2)
    h, w = h * zoom, w * zoom
    rows = -(-n // columns)
    canvas = np.full((rows * (h + gap) + gap, columns * (w + gap) + gap, c), 255, dtype=np.uint8)
    for i, cell in enumerate(cells):
        top, left = gap + (i // columns) * (h + gap), gap + (i % columns) * (w + gap)
        canvas[top:top + h, left:left + w] = cell
    return canvas


def save_grid(path: str | Path, images: np.ndarray, columns: int, levels: int, zoom: int = 1) -> None:
    """Write ``grid(...)`` as a PNG: greyscale for one channel, RGB for three."""
    from tfspec.data.images import _extra

    image = _extra("PIL.Image")
    canvas = grid(images, columns, levels, zoom)
    mode = "L" if canvas.shape[2] == 1 else "RGB"
    image.fromarray(canvas[..., 0] if mode == "L" else canvas, mode).save(path, format="PNG", optimize=True)
