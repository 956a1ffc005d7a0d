"""Build a corpus directory: from Debian's documentation (``fetch_corpus``), from the user's own
text or TSV files (``prepare_corpus``), or as a small sample of another corpus (``make_sample``).

All three end in ``_finish``: clean, split by document, write the files, README and manifest.
A request that matches the manifest already in the directory returns at once (the cache).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tfspec.data import corpus, debian
from tfspec.data.clean import clean
from tfspec.data.sources import SOURCES
from tfspec.errors import TfspecError

LANG = re.compile(r"^[a-z]{2,3}(?:[-_][A-Za-z]{2,4})?$")


def parse_pair(pair: str) -> tuple[str, str]:
    parts = pair.split("-", 1)
    if len(parts) != 2 or not all(LANG.match(p) for p in parts) or parts[0] == parts[1]:
        raise TfspecError(f"--pair {pair!r}: expected two different language codes joined by '-', e.g. en-de")
    return parts[0], parts[1]


def fetch_corpus(data_dir: str | Path, pair: str = "en-de", sources: list[str] | None = None, *,
                 held_out: int | None = None, force: bool = False, progress: bool = False) -> dict:
    """Download the documentation packages of ``sources`` (default: all), align English with the
    other language of ``pair`` (either side may be English), clean, split, write; the manifest."""
    data_dir = Path(data_dir)
    src, tgt = parse_pair(pair)
    if "en" not in (src, tgt):
        raise TfspecError(f"--pair {pair}: Debian's documentation is written in English, so one side must be en")
    lang = tgt if src == "en" else src
    names = list(sources or SOURCES)
    unknown = [n for n in names if n not in SOURCES]
    if unknown:
        raise TfspecError(f"unknown source(s) {', '.join(unknown)}: choose from {', '.join(SOURCES)}")
    request = {"kind": "fetch", "pair": pair, "sources": names, "held_out": held_out}
    if not force and (manifest := corpus.current(data_dir, request)):
        return manifest
    wanted = list(dict.fromkeys(p for n in names for p in SOURCES[n].packages(lang)))
    root, packages = debian.fetch(wanted, data_dir / ".cache", force=force, progress=progress)
    versions = {p.name: p.version for p in packages}
    raw = [p for n in names for p in SOURCES[n].pairs(root, lang, progress)]
    cleaned = clean(raw, untranslated=True)  # English is the source here; swapped below if need be
    kept = cleaned.kept if src == "en" else [(t, s, d) for s, t, d in cleaned.kept]
    about = {n: {"title": SOURCES[n].title, "licence": SOURCES[n].licence,
                 "packages": {p: versions[p] for p in SOURCES[n].packages(lang)}} for n in names}
    return _finish(data_dir, kept, cleaned, request, src, tgt, held_out, about, "document")


def prepare_corpus(data_dir: str | Path, *, src_file: str | Path | None = None, tgt_file: str | Path | None = None,
                   tsv: str | Path | None = None, pair: str | None = None, held_out: int | None = None,
                   force: bool = False) -> dict:
    """A corpus from ``src_file`` + ``tgt_file`` (one segment per line) or a ``tsv`` of
    ``source<TAB>target[<TAB>document]`` lines. Without a document column, blocks of consecutive
    lines stand in for documents (the split says so)."""
    from tfspec.data.text import read_parallel, read_tsv

    if (tsv is None) == (src_file is None or tgt_file is None):
        raise TfspecError("give either --src FILE and --tgt FILE, or --tsv FILE")
    inputs = [Path(tsv)] if tsv is not None else [Path(src_file), Path(tgt_file)]
    if pair is None:
        suffixes = [p.suffix.lstrip(".") for p in inputs]
        languages = tsv is None and suffixes[0] != suffixes[1] and all(LANG.match(s) for s in suffixes)
        pair = "-".join(suffixes) if languages else "en-de"
    src, tgt = parse_pair(pair)
    request = {"kind": "prepare", "pair": pair, "held_out": held_out, "inputs": [_identity(p) for p in inputs]}
    data_dir = Path(data_dir)
    if not force and (manifest := corpus.current(data_dir, request)):
        return manifest
    raw, method = read_tsv(inputs[0]) if tsv is not None else read_parallel(*inputs)
    cleaned = clean(raw, untranslated=src == "en" and tgt != "en")
    # documents are named after the first input file (text.py), and sources after documents
    about = {inputs[0].name: {"title": "your files: " + ", ".join(str(p) for p in inputs),
                              "licence": "the files' own", "packages": {}}}
    return _finish(data_dir, cleaned.kept, cleaned, request, src, tgt, held_out, about, method)


def _identity(path: Path) -> dict:
    """What tells a changed input file: its absolute path, size and modification time."""
    try:
        st = path.stat()
    except OSError as e:
        raise TfspecError(f"{path}: {e.strerror or 'cannot read it'}") from None
    return {"path": str(path.resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _finish(data_dir: Path, kept: list, cleaned, request: dict, src: str, tgt: str, held_out: int | None,
            about: dict, method: str) -> dict:
    from tfspec.data.readme import render

    if not kept:
        raise TfspecError(f"no pairs left after cleaning ({cleaned.seen} seen, dropped: "
                          f"{dict(cleaned.dropped) or 'none'})")
    if held_out is not None and held_out < 1:
        raise TfspecError(f"--held-out {held_out}: dev and test need at least one pair each")
    size = held_out or corpus.held_out_size(len(kept))
    splits, overlap = corpus.split_by_document(kept, size)
    for name, info in about.items():
        info["pairs"] = {s: sum(_source(p[2]) == name for p in splits[s]) for s in corpus.SPLITS}
    extra = {"split": method, "held_out": size, "sources": about,
             "cleaning": {"aligned": cleaned.seen, "kept": len(kept), "dropped": dict(cleaned.dropped),
                          "held_out_overlap": overlap}}
    manifest = corpus.base_manifest(request, src, tgt, splits, extra)
    return corpus.write(data_dir, splits, manifest, render(manifest, data_dir))


def _source(doc: str) -> str:
    return doc.split(":", 1)[0]


def make_sample(corpus_dir: str | Path, out_dir: str | Path, *, sizes: tuple[int, int, int] = (2000, 200, 200),
                source: str = "libreoffice", max_words: int = 30) -> dict:
    """A small corpus taken from a prepared one: pairs of ``source`` with at most ``max_words``
    words a side, chosen by the sha256 of their text (so stable), each split from the same split."""
    corpus_dir, out_dir = Path(corpus_dir), Path(out_dir)
    manifest = corpus.load_manifest(corpus_dir)
    src, tgt = manifest["src"], manifest["tgt"]
    splits = {}
    for split, n in zip(corpus.SPLITS, sizes):
        pairs = corpus.read_split(corpus_dir, split, src, tgt)
        docs = corpus.read_lines(corpus_dir / f"{split}.docs")
        fit = [(s, t, d) for (s, t), d in zip(pairs, docs)
               if _source(d) == source and max(len(s.split()), len(t.split())) <= max_words]
        chosen = set(sorted(range(len(fit)), key=lambda i: hashlib.sha256(fit[i][0].encode()).hexdigest())[:n])
        splits[split] = [p for i, p in enumerate(fit) if i in chosen]
    about = {source: {**manifest["sources"][source], "pairs": {s: len(splits[s]) for s in corpus.SPLITS}}}
    request = {"kind": "sample", "from": manifest["request"], "sizes": list(sizes), "source": source,
               "max_words": max_words}
    extra = {"split": manifest["split"], "held_out": sizes[1], "sources": about,
             "cleaning": {"sampled_from": {s: manifest["splits"][s]["pairs"] for s in corpus.SPLITS}}}
    from tfspec.data.readme import render

    sample = corpus.base_manifest(request, src, tgt, splits, extra)
    return corpus.write(out_dir, splits, sample, render(sample, out_dir))
