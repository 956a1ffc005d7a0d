"""Parallel text for training and evaluation: fetch, prepare, read, tokenize.

A corpus is a directory (layout in ``tfspec.data.corpus``) made by one of

- ``fetch_corpus(DIR, "en-de")``: English-German documentation from Debian packages
  (LibreOffice, GIMP, Debian Reference, Debian Handbook, GNOME help), aligned and cleaned;
- ``prepare_corpus(DIR, src_file=..., tgt_file=...)`` or ``tsv=...``: the user's own text;
- ``sample_dir()``: a small LibreOffice en-de sample shipped with tfspec (tests, quick runs).

The trainer reads it with ``read_split`` and tokenizes with the model ``train_tokenizer``
writes beside it (``load_tokenizer``).
"""

from __future__ import annotations

from pathlib import Path

from tfspec.data.build import fetch_corpus, make_sample, prepare_corpus
from tfspec.data.corpus import SPLITS, load_manifest, read_split, verify
from tfspec.data.sources import SOURCES
from tfspec.data.tokenizer import SPECIAL, load_tokenizer, tokenizer_path, train_tokenizer


def sample_dir() -> Path:
    """The shipped sample corpus: 2,000 / 200 / 200 en-de pairs of LibreOffice help (MPL-2.0).
    Read-only: train tokenizers on a copy (``shutil.copytree``)."""
    return Path(__file__).parent / "sample"


__all__ = ["SOURCES", "SPECIAL", "SPLITS", "fetch_corpus", "load_manifest", "load_tokenizer", "make_sample",
           "prepare_corpus", "read_split", "sample_dir", "tokenizer_path", "train_tokenizer", "verify"]
