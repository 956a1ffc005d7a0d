"""Word-level language identification in mixed-language text, composed from a langid corpus.

Code-switched text changes language inside a line, so the language is a property of each word,
not of the text: a token task (``tfspec finetune`` with a token_classification head). A line
here joins 2-3 fragments of 3-6 consecutive words, each cut from a sentence of another
language, and labels each word with its sentence's language; a word without a letter (a dash,
a number) is labelled ``other``, as in LinCE's language-identification tags, since nothing in
it tells a language. Short fragments make context matter: a word alone (``die``, ``a``,
``con``) is often ambiguous, while its neighbours usually are not.

The lines of a split draw only on the same split of the langid corpus, so its held-out pages
stay held out (``.docs`` lists the pages a line's fragments come from). Deterministic given
the seed: split k draws from ``numpy.random.default_rng([seed, k])``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from tfspec.data.clean import LETTER
from tfspec.data.corpus import SPLITS, read_lines
from tfspec.data.labelled import read_labelled, write_labelled
from tfspec.errors import TfspecError

FRAGMENTS = (2, 3)
"""Fragments per line, each in another language."""
WORDS = (3, 6)
"""Words per fragment (fewer when the sentence is shorter)."""
OTHER = "other"


def build_code_switch(langid_dir: str | Path, out: str | Path, sizes: dict[str, int], seed: int = 0) -> dict:
    """Compose ``sizes[split]`` lines per split from ``langid_dir`` (``tfspec data langid``)
    into ``out``; return the manifest written."""
    langid_dir, out = Path(langid_dir), Path(out)
    if out.resolve() == langid_dir.resolve():
        raise TfspecError(f"{out}: would overwrite the langid corpus it is composed from; choose another OUT_DIR")
    sentences = {split: _sentences(langid_dir, split) for split in SPLITS}
    splits = {}
    for k, split in enumerate(SPLITS):
        rng = np.random.default_rng([seed, k])
        splits[split] = [compose(sentences[split], rng) for _ in range(sizes[split])]
    counts = {s: dict(sorted(Counter(tag for _, tags, _ in items for tag in tags.split()).items()))
              for s, items in splits.items()}
    request = {"kind": "code-switch", "langid": str(langid_dir.resolve()), "sizes": sizes, "seed": seed}
    extra = {"task": "tokens", "split": "as the langid corpus's: each split's lines draw on the same split",
             "fragments": list(FRAGMENTS), "words_per_fragment": list(WORDS), "labels": counts}
    return write_labelled(out, splits, request, extra, _readme)


def _sentences(langid_dir: Path, split: str) -> dict[str, list[tuple[list[str], str]]]:
    """language -> (words, page) of every sentence of one split; at least two languages."""
    texts, labels = read_labelled(langid_dir, split)
    pages = read_lines(langid_dir / f"{split}.docs")
    if len(pages) != len(texts):
        raise TfspecError(f"{langid_dir}: {split}.txt has {len(texts):,} lines but {split}.docs has {len(pages):,}")
    by_language = defaultdict(list)
    for text, label, page in zip(texts, labels, pages):
        by_language[label].append((text.split(), page))
    if len(by_language) < 2:
        raise TfspecError(f"{langid_dir / f'{split}.labels'}: one language ({labels[0]}); mixing needs two")
    return dict(sorted(by_language.items()))


def compose(sentences: dict[str, list[tuple[list[str], str]]], rng) -> tuple[str, str, str]:
    """One line: (words, their labels, the pages of its fragments), space-separated."""
    languages = list(sentences)
    count = min(int(rng.integers(FRAGMENTS[0], FRAGMENTS[1] + 1)), len(languages))
    words, tags, pages = [], [], []
    for language in rng.choice(languages, size=count, replace=False):
        sentence, page = sentences[language][rng.integers(len(sentences[language]))]
        n = min(len(sentence), int(rng.integers(WORDS[0], WORDS[1] + 1)))
        start = int(rng.integers(len(sentence) - n + 1))
        for word in sentence[start:start + n]:
            words.append(word)
            tags.append(language if LETTER.search(word) else OTHER)
        pages.append(page)
    return " ".join(words), " ".join(tags), " ".join(pages)


def _readme(manifest: dict) -> str:
    labels = sorted({tag for counts in manifest["labels"].values() for tag in counts})
    rows = [f"| {s} | {manifest['splits'][s]['pairs']:,} | " +
            " | ".join(f"{manifest['labels'][s].get(x, 0):,}" for x in labels) + " |" for s in SPLITS]
    request = manifest["request"]
    return "\n".join([
        "# Code-switched language identification: a label per word", "",
        f"Made by {manifest['created_by']} with `tfspec data code-switch {request['langid']} OUT_DIR --train "
        f"{request['sizes']['train']} --dev {request['sizes']['dev']} --test {request['sizes']['test']} --seed "
        f"{request['seed']}`.", "",
        f"`{{train,dev,test}}.txt`: lines of {FRAGMENTS[0]}-{FRAGMENTS[1]} fragments of {WORDS[0]}-{WORDS[1]} words, "
        "each from a sentence of another language; `.labels`: one label per word (its language, or `other` for a "
        "word without a letter); `.docs`: the pages of the fragments. Each split's lines draw on the same split of "
        "the langid corpus. Its README.md names the sources and their licence; keep it with any copy.", "",
        "| split | lines | " + " | ".join(labels) + " |", "|---|---:|" + "---:|" * len(labels), *rows]) + "\n"
