"""Language identification from Debian's documentation: LibreOffice help in several languages.

Every language's help pages share their paths and paragraph ids (``sources.py``), so a
paragraph is labelled with the language of the page it came from, and a page held out is held
out in every language: test sentences come from pages whose text, in any language, was never
seen in training. Pages go to test, dev or train by the sha256 of their path.

Cleaning keeps paragraphs of 4-60 words with letters, drops a translation identical to the
English paragraph of the same id (untranslated text would carry the wrong label) and any text
that occurs under two labels, and removes from train any text that a held-out split holds.
The directory is a tfspec corpus whose two sides are both ``txt`` (so ``tfspec train --src
txt --tgt txt`` pretrains a masked LM on it) plus ``{train,dev,test}.labels``, one language
code per line, which ``tfspec finetune`` reads.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from pathlib import Path

from tfspec.data import corpus, debian
from tfspec.data.clean import LETTER, normalize
from tfspec.data.labelled import write_labelled
from tfspec.data.markup import blocks
from tfspec.data.sources import SOURCES
from tfspec.errors import TfspecError

LANGUAGES = ("de", "en", "es", "fr", "it", "nl", "pt", "sv")
"""Default: Latin script, with close relatives (es/pt/it, de/nl, sv) that make it a real task."""
WORDS = (4, 60)
HELD_OUT = 20  # one page in 20 to test, one to dev


def package(lang: str) -> str:
    return "libreoffice-help-en-us" if lang == "en" else f"libreoffice-help-{lang}"


def split_of(page: str) -> str:
    bucket = int(hashlib.sha256(page.encode("utf-8")).hexdigest(), 16) % HELD_OUT
    return "test" if bucket == 0 else "dev" if bucket == 1 else "train"


def paragraphs(root: Path, lang: str) -> dict[tuple[str, str], str]:
    """(page, paragraph id) -> text of one language's help pages (English: the en-US pages)."""
    documents = SOURCES["libreoffice"].documents
    pages = ((rel, en) for rel, en, _ in documents(root, "en-US")) if lang == "en" else \
        ((rel, tgt) for rel, _, tgt in documents(root, lang))
    out = {}
    for rel, path in pages:
        for block in blocks(path.read_text(encoding="utf-8", errors="replace")):
            if block.id.startswith(("par_id", "hd_id")):  # ids of other elements are not stable
                out.setdefault((rel, block.id), normalize(block.text))
    return out


def build_langid(out: str | Path, languages: tuple[str, ...] = LANGUAGES, per_language: int = 4000,
                 force: bool = False, progress: bool = False) -> dict:
    """Write the language-identification corpus into ``out``; its manifest. ``per_language``
    caps each language's train sentences (dev and test: a quarter of it), chosen by sha256."""
    out = Path(out)
    languages = tuple(sorted(set(languages)))
    if len(languages) < 2:
        raise TfspecError(f"--languages {','.join(languages)}: identification needs at least two languages")
    request = {"kind": "langid", "languages": list(languages), "per_language": per_language}
    if not force and (manifest := corpus.current(out, request)):
        return manifest
    wanted = sorted(set(languages) | {"en"})  # English also to recognise untranslated paragraphs
    root, packages = debian.fetch([package(x) for x in wanted], out / ".cache", force=force, progress=progress)
    texts = {lang: paragraphs(root, lang) for lang in wanted}
    labelled = _clean(texts, languages)
    splits = _choose(labelled, per_language)
    return _write(out, splits, request, {p.name: p.version for p in packages})


def _clean(texts: dict, languages: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(text, language, page) of every paragraph that passes the rules of the module docstring."""
    english = texts["en"]
    found = []
    for lang in languages:
        for (page, pid), text in texts[lang].items():
            if not WORDS[0] <= len(text.split()) <= WORDS[1] or not LETTER.search(text):
                continue
            if lang != "en" and english.get((page, pid)) == text:
                continue
            found.append((text, lang, page))
    labels = defaultdict(set)
    for text, lang, _ in found:
        labels[text].add(lang)
    seen, kept = set(), []
    for text, lang, page in found:
        if len(labels[text]) == 1 and text not in seen:
            seen.add(text)
            kept.append((text, lang, page))
    return kept


def _choose(labelled: list, per_language: int) -> dict[str, list]:
    """Split by page; cap each language per split by the sha256 of the text (stable choices)."""
    caps = {"train": per_language, "dev": max(1, per_language // 4), "test": max(1, per_language // 4)}
    grouped = defaultdict(list)
    for item in labelled:
        grouped[split_of(item[2]), item[1]].append(item)
    splits = {s: [] for s in corpus.SPLITS}
    for (split, _), items in sorted(grouped.items()):
        items.sort(key=lambda item: hashlib.sha256(item[0].encode("utf-8")).hexdigest())
        splits[split] += items[:caps[split]]
    held = {item[0] for s in ("dev", "test") for item in splits[s]}
    splits["train"] = [item for item in splits["train"] if item[0] not in held]
    empty = [s for s in corpus.SPLITS if not splits[s]]
    if empty:
        raise TfspecError(f"no sentences for {', '.join(empty)}: too few pages in these packages")
    return splits


def _write(out: Path, splits: dict[str, list], request: dict, versions: dict) -> dict:
    """The labelled splits (``.docs``: the page), README.md and manifest.json."""
    counts = {s: {lang: sum(i[1] == lang for i in items) for lang in request["languages"]}
              for s, items in splits.items()}
    return write_labelled(out, splits, request, {"split": "page (sha256 of its path)", "labels": counts,
                                                 "packages": versions, "licence": "MPL-2.0 (LibreOffice help)"},
                          _readme)


def _readme(manifest: dict) -> str:
    languages = manifest["request"]["languages"]
    rows = [f"| {s} | " + " | ".join(f"{manifest['labels'][s][x]:,}" for x in languages) + " |" for s in corpus.SPLITS]
    return "\n".join([
        "# Language identification: LibreOffice help", "", f"Made by {manifest['created_by']} with "
        f"`tfspec data langid --languages {','.join(languages)} --per-language "
        f"{manifest['request']['per_language']}`.", "",
        "`{train,dev,test}.txt` one paragraph per line, `.labels` its language, `.docs` its page. Test and dev "
        "are whole pages (the same pages in every language). Packages: " +
        ", ".join(f"`{p}` {v}" for p, v in manifest["packages"].items()) + ". Licence: MPL-2.0 "
        "(https://mozilla.org/MPL/2.0/); keep this file with any copy.", "",
        "| split | " + " | ".join(languages) + " |", "|---|" + "---:|" * len(languages), *rows]) + "\n"
