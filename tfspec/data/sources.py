"""The parallel sources inside Debian packages and how each one aligns its two languages.

LibreOffice gives every paragraph an id (``par_id3146957``, ``hd_id3147291``) that is the
same in every language, so its pairs are exact. The others are generated from one source
document per language (DocBook, Publican, Mallard) and share their structure; their blocks are
aligned by a language-independent key (``markup.Block.key``) with ``difflib``, and only runs
of equal keys are paired, so a paragraph missing on one side drops out instead of shifting
the rest.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tfspec.data.markup import Block, blocks

Documents = Callable[[Path, str], Iterator[tuple[str, Path, Path]]]  # (root, lang) -> (doc, en file, tgt file)


@dataclass(frozen=True)
class Source:
    name: str
    title: str
    licence: str
    packages: Callable[[str], list[str]]  # target language -> Debian packages holding both languages
    documents: Documents
    by_id: bool  # align by element id (LibreOffice) rather than by structure

    def pairs(self, root: Path, lang: str, progress: bool = False) -> Iterator[tuple[str, str, str]]:
        """``(english, translation, document)`` for every aligned block of every document."""
        from tqdm import tqdm

        docs = list(self.documents(root, lang))
        for doc, en, tgt in tqdm(docs, desc=self.name, unit="doc", disable=not progress, leave=False):
            a, b = blocks(_read(en)), blocks(_read(tgt))
            for s, t in (_by_id if self.by_id else _by_structure)(a, b):
                yield s, t, f"{self.name}:{doc}"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _by_id(a: list[Block], b: list[Block]) -> list[tuple[str, str]]:
    def index(blocks: list[Block]) -> dict[tuple[str, int], str]:
        seen, out = Counter(), {}
        for block in blocks:
            if block.id.startswith(("par_id", "hd_id")):  # ids of other elements are not stable
                out[block.id, seen[block.id]] = block.text
                seen[block.id] += 1
        return out

    tgt = index(b)
    return [(text, tgt[key]) for key, text in index(a).items() if key in tgt]


def _by_structure(a: list[Block], b: list[Block]) -> list[tuple[str, str]]:
    matcher = difflib.SequenceMatcher(None, [x.key for x in a], [x.key for x in b], autojunk=False)
    return [(a[i + k].text, b[j + k].text) for i, j, n in matcher.get_matching_blocks() for k in range(n)]


def _mirrored(en_dir: str, tgt_dir: str, pattern: str, rename: Callable[[str, str], str] = lambda rel, lang: rel
              ) -> Documents:
    """Documents at the same relative path under an English and a translated folder."""

    def documents(root: Path, lang: str) -> Iterator[tuple[str, Path, Path]]:
        base = root / en_dir
        tgt_base = _resolve(root, tgt_dir.format(lang=lang))
        for en in sorted(base.glob(pattern)):
            rel = en.relative_to(base).as_posix()
            tgt = tgt_base / rename(rel, lang)
            if tgt.is_file():
                yield rel, en, tgt

    return documents


def _resolve(root: Path, pattern: str) -> Path:
    """A folder whose name may carry a region (the Handbook's ``de-DE``): the first match."""
    matches = sorted(root.glob(pattern)) if "*" in pattern else [root / pattern]
    return matches[0] if matches else root / pattern.replace("*", "")


SOURCES = {s.name: s for s in [
    Source("libreoffice", "LibreOffice help", "MPL-2.0",
           lambda lang: ["libreoffice-help-en-us", f"libreoffice-help-{lang}"],
           _mirrored("usr/share/libreoffice/help/en-US", "usr/share/libreoffice/help/{lang}", "**/*.html"), True),
    Source("gimp", "GIMP user manual", "GFDL-1.2",
           lambda lang: ["gimp-help-en", f"gimp-help-{lang}"],
           _mirrored("usr/share/gimp/2.0/help/en", "usr/share/gimp/2.0/help/{lang}", "*.html"), False),
    Source("debian-reference", "Debian Reference", "GPL-2+",
           lambda lang: ["debian-reference-en", f"debian-reference-{lang}"],
           _mirrored("usr/share/debian-reference", "usr/share/debian-reference", "*.en.html",
                     lambda rel, lang: rel.replace(".en.", f".{lang}.")), False),
    Source("debian-handbook", "The Debian Administrator's Handbook", "GPL-2+ or CC-BY-SA-3.0",
           lambda lang: ["debian-handbook"],
           _mirrored("usr/share/doc/debian-handbook/html/en-US", "usr/share/doc/debian-handbook/html/{lang}-*",
                     "*.html"), False),
    Source("gnome-user-docs", "GNOME help and system admin guide", "CC-BY-SA-3.0",
           lambda lang: ["gnome-user-docs"],
           _mirrored("usr/share/help/C", "usr/share/help/{lang}", "**/*.page"), False),
]}
