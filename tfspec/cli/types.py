"""argparse types: command-line values out of range stop at the parser, with the flag named.

A beam of 0, a negative thread count or an output path that is a file would otherwise reach
onnxruntime, numpy or the file system and fail there, far from the flag that caused it. Numbers
are read by the types of ``tfspec.options``, so a flag and the Python API refuse in the same words.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tfspec import options
from tfspec.cli.fields import argument, field_argument
from tfspec.search import SearchOptions
from tfspec.spec.bounds import MAX_POSITIONS


def integer(low: int, high: int = MAX_POSITIONS):
    """An int in [low, high] (``tfspec.options.whole``: the words of the options models)."""
    return argument(options.whole(low, high))


def number(low: float, high: float, low_open: bool = False):
    """A finite float in [low, high] (or (low, high] with ``low_open``)."""
    return argument(options.number(low, high, low_open))


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
THREADS = argument(options.THREADS)
BEAM = field_argument(SearchOptions, "beam")
ALPHA = field_argument(SearchOptions, "alpha")
