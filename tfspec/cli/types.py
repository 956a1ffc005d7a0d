"""argparse types: command-line values out of range stop at the parser, with the flag named.

A beam of 0, a negative thread count or an output path that is a file would otherwise reach
onnxruntime, numpy or the file system and fail there, far from the flag that caused it.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from tfspec.spec.bounds import MAX_POSITIONS


def integer(low: int, high: int = MAX_POSITIONS):
    """An int in [low, high]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low:,} and {high:,}, got {text[:40]}")
        return value
    parse.__name__ = "integer"
    return parse


def number(low: float, high: float, low_open: bool = False):
    """A finite float in [low, high] (or (low, high] with ``low_open``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
        if not (math.isfinite(value) and (low < value if low_open else low <= value) and value <= high):
            bound = f"more than {low:g}" if low_open else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"must be a finite number {bound} and at most {high:g}, got {text[:40]}")
        return value
    parse.__name__ = "number"
    return parse


def out_dir(text: str) -> Path:
    """A directory to write into: one that exists, or a path where one can be made."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory; name a directory (created if "
                                         "needed)")
    return path


def out_file(text: str) -> Path:
    """A file to write: not a directory, in a directory that exists."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; name a file")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{path.parent} does not exist; create it first or name another file")
    return path


POSITIVE = integer(1)
SEED = integer(0, 2**32 - 1)
THREADS = integer(1, 1024)
BEAM = integer(1, 1024)
ALPHA = number(0, 10)
"""GNMT's length penalty: 0 is none, the paper's 0.6; past a few it only favours length."""
