"""Checks of values read from files a user hands in (export manifests, run records, corpus and
image manifests, checkpoint indexes and states): they are data, so a file name must stay a
name inside its directory, a count a whole number and a list of names a list of strings."""

from __future__ import annotations

from pathlib import Path


def file_name(value) -> bool:
    """Whether ``value`` names a file inside a directory: a string that is no path out of it."""
    return isinstance(value, str) and value not in ("", ".", "..") and Path(value).name == value


def whole(value) -> bool:
    """Whether ``value`` is an integer (JSON's true and false are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def names(value) -> bool:
    """Whether ``value`` is a list of strings."""
    return isinstance(value, list) and all(isinstance(v, str) for v in value)
