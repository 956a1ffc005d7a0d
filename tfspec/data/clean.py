"""Cleaning rules for parallel segments of real documentation (docs/data.md, ``data fetch``): what
Debian's translated manuals hold besides sentences (placeholders, markup, tables flattened into
lines, untranslated copies).

Each rule has a name; ``clean`` counts how many pairs each one dropped, so the corpus README
can say where the data went. The rules are checked in the order of ``RULES``: a pair is
counted under the first rule it breaks.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

MAX_WORDS = 100  # longer paragraphs are lists or tables flattened into one line
RATIO, SLACK = 3, 2  # the longer side may have at most RATIO * shorter + SLACK words

# Placeholders of printf, Qt, Python, shell and LibreOffice ($[officename], %PRODUCTNAME).
PLACEHOLDER = re.compile(r"%\d*\$?[-+ #0]*\d*(?:\.\d+)?[a-zA-Z%]|%[A-Z_]+%?|\{[\w.:]*\}|\$\[?\(?\w+\)?\]?|<[^>]*>")
LETTER = re.compile(r"[^\W\d_]", re.UNICODE)
WORD = re.compile(r"\w+", re.UNICODE)
# English function words that are not words of the common target languages (de, fr, es, it):
# a target sentence made of them is English that nobody translated.
ENGLISH = frozenset("the and of to are with for this that you your which be can from it not "
                    "when by or these there has have".split())
INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u200c\u200d\u2060\ufeff"))  # soft hyphen, zero-width


def normalize(text: str) -> str:
    """NFC, no invisible characters, every whitespace run (tabs, NBSP, newlines) one space."""
    return " ".join(unicodedata.normalize("NFC", text).translate(INVISIBLE).split())


def _format_only(text: str) -> bool:
    return not LETTER.search(PLACEHOLDER.sub(" ", text))


def _untranslated(src: str, tgt: str) -> bool:
    src_words, tgt_words = WORD.findall(src.lower()), WORD.findall(tgt.lower())
    if src_words == tgt_words:  # differs only in punctuation, case or spacing
        return True
    english = sum(w in ENGLISH for w in tgt_words)
    return len(tgt_words) >= 4 and english >= 0.2 * len(tgt_words)


def _length(src: str, tgt: str) -> bool:
    return not (1 <= len(src.split()) <= MAX_WORDS and 1 <= len(tgt.split()) <= MAX_WORDS)


def _ratio(src: str, tgt: str) -> bool:
    a, b = sorted((len(src.split()), len(tgt.split())))
    return b > RATIO * a + SLACK


# name -> test that is True when the pair must go (both sides already normalized)
RULES = {
    "empty": lambda s, t: not s or not t,
    "identical": lambda s, t: s == t,
    "format-only": lambda s, t: _format_only(s) or _format_only(t),
    "length": _length,
    "ratio": _ratio,
    "untranslated": _untranslated,
}


@dataclass
class Cleaned:
    """The kept pairs (with whatever each carried, e.g. its document) and the drop counts."""

    kept: list[tuple]
    dropped: Counter

    @property
    def seen(self) -> int:
        return len(self.kept) + sum(self.dropped.values())


def clean(pairs: Iterable[tuple], *, untranslated: bool = True) -> Cleaned:
    """Normalize and filter ``(src, tgt, *rest)`` tuples; exact duplicate pairs are kept once.

    ``untranslated`` drops targets that are still English: right when the source is English and
    the target is not (with an English target it would drop everything).
    """
    rules = {k: v for k, v in RULES.items() if untranslated or k != "untranslated"}
    kept, dropped, seen = [], Counter(), set()
    for src, tgt, *rest in pairs:
        src, tgt = normalize(src), normalize(tgt)
        broken = next((name for name, test in rules.items() if test(src, tgt)), None)
        if broken is None and (src, tgt) in seen:
            broken = "duplicate"
        if broken:
            dropped[broken] += 1
            continue
        seen.add((src, tgt))
        kept.append((src, tgt, *rest))
    return Cleaned(kept, dropped)
