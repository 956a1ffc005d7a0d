"""Reading and checking files a user hands in (export manifests, run records, corpus and image
manifests, checkpoint indexes and states): they are data, so the JSON reader fails only with
ValueError or OSError, a file name must stay a name inside its directory, a count a whole number
and a list of names a list of strings."""

from __future__ import annotations

import json
from pathlib import Path

MAX_JSON_BYTES = 2**26
"""A JSON file tfspec reads (manifests, configs, vocabularies, indexes): the largest published
ones (tokenizer vocabularies, shard indexes) are a few MB."""


def file_name(value) -> bool:
    """Whether ``value`` names a file inside a directory: a string that is no path out of it."""
    return isinstance(value, str) and value not in ("", ".", "..") and Path(value).name == value


def whole(value) -> bool:
    """Whether ``value`` is an integer (JSON's true and false are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def names(value) -> bool:
    """Whether ``value`` is a list of strings."""
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def parse_json(text: str | bytes):
    """``json.loads`` for text from a file: every way it fails is a ValueError (json raises
    RecursionError for deep nesting, ValueError for a number of over 4,300 digits)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as e:
        if "integer string conversion" in str(e):  # Python's advice to lift the limit is not ours to give
            raise ValueError("a number of more than 4,300 digits") from None
        raise


def read_json(path: Path, limit: int = MAX_JSON_BYTES):
    """The JSON value of the file ``path``. A missing file is FileNotFoundError; one that is not
    a regular file (a FIFO would hang, /dev/zero never end), is larger than ``limit`` bytes, is
    not UTF-8 or not JSON is a ValueError saying so."""
    if path.exists() and not path.is_file():
        raise ValueError("not a regular file")
    if (size := path.stat().st_size) > limit:
        raise ValueError(f"{size:,} bytes, more than the {limit:,} such a file can hold")
    return parse_json(path.read_text(encoding="utf-8"))


def json_object(path: Path, what: str) -> dict:
    """The JSON object in the file ``path`` (``what`` it holds, for the message): anything else
    (unreadable, too large, not JSON, not an object) is one error naming the file."""
    from tfspec.errors import TfspecError

    try:
        found = read_json(Path(path))
    except (OSError, ValueError) as e:
        raise TfspecError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(found, dict):
        raise TfspecError(f"{path}: expected a JSON object of {what}")
    return found


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in blocks (checkpoint shards run to gigabytes)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
