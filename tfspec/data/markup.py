"""Markup -> text blocks: the paragraphs, headings, list and table cells of an HTML or XML page.

One small event-driven parser (the standard library's ``html.parser``) serves the HTML help
of LibreOffice, GIMP, Debian Reference and the Debian Handbook and GNOME's Mallard ``.page``
XML: the translated documents share their structure, so the *key* of a block (its tag, class,
id, links, anchors and digits, none of which translators change) lets the two languages be
aligned without looking at the words (see ``sources.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

# Elements whose text is a segment. Nested ones (li > p) become segments of their own.
BLOCKS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "dt", "dd", "td", "th", "caption",
                    "figcaption", "title", "desc", "item", "entry", "para", "subtitle"})
# Subtrees that are code, navigation, metadata or credits: not prose, or not translated.
SKIP = frozenset({"head", "script", "style", "pre", "screen", "programlisting", "nav", "header",
                  "footer", "aside", "credit", "mal:credit", "revision", "license", "synopsis", "math",
                  "svg", "noscript", "comment"})
SKIP_CLASSES = frozenset({"navheader", "navfooter", "docnav", "toc", "debug", "bug", "programlisting", "screen",
                          "literallayout", "synopsis"})
BLOCK_CLASSES = frozenset({"para", "simpara"})  # Publican (the Debian Handbook) writes <div class="para">
VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
                  "track", "wbr"})
DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class Block:
    """One segment of a page: ``id`` is the element's id attribute (LibreOffice aligns by it),
    ``key`` its language-independent shape (the others align by it)."""

    id: str
    key: tuple
    text: str


class _Parser(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str]] = []  # (tag, role) with role in block | skip | other
        self.skipping = 0
        self.open: list[dict] = []  # blocks being collected, innermost last
        self.done: list[tuple[int, Block]] = []
        self.started = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in VOID:
            return self._inline(tag, attrs)
        classes = set((attrs.get("class") or "").split())
        # LibreOffice's switchinline: one hidden <span> per platform or module; the plain default
        # variant carries no class, the others (MAC, WIN, CALC, ...) are skipped.
        hidden_variant = "hidden" in attrs and "class" in attrs
        if tag in SKIP or classes & SKIP_CLASSES or hidden_variant:
            role = "skip"
            self.skipping += 1
        elif (tag in BLOCKS or classes & BLOCK_CLASSES) and not self.skipping:
            role = "block"
            self.open.append({"order": self.started, "tag": tag, "class": attrs.get("class") or "",
                              "id": attrs.get("id") or "", "marks": [], "text": []})
            self.started += 1
        else:
            role = "other"
            self._inline(tag, attrs)
        self.stack.append((tag, role))

    def handle_startendtag(self, tag, attrs):
        self._inline(tag, dict(attrs))

    def _inline(self, tag, attrs):
        """Links, anchors and images inside a block are the same in every language: remember them."""
        if self.open and not self.skipping:
            for name in ("href", "id", "name", "src", "xref"):
                if attrs.get(name):
                    self.open[-1]["marks"].append(attrs[name])

    def handle_endtag(self, tag):
        if not any(t == tag for t, _ in self.stack):
            return  # a stray end tag
        while self.stack:
            t, role = self.stack.pop()
            if role == "skip":
                self.skipping -= 1
            elif role == "block":
                self._close()
            if t == tag:
                break

    def _close(self):
        b = self.open.pop()
        text = " ".join("".join(b["text"]).split())
        if text:
            key = (b["tag"], b["class"], b["id"], tuple(sorted(b["marks"])), tuple(sorted(DIGITS.findall(text))))
            self.done.append((b["order"], Block(b["id"], key, text)))

    def handle_data(self, data):
        if self.open and not self.skipping:
            self.open[-1]["text"].append(data)


def blocks(markup: str) -> list[Block]:
    """The text blocks of a page in document order, markup stripped, whitespace collapsed."""
    parser = _Parser()
    parser.feed(markup)
    parser.close()
    while parser.stack:  # unclosed elements at the end of a truncated page
        parser.handle_endtag(parser.stack[-1][0])
    return [b for _, b in sorted(parser.done, key=lambda item: item[0])]
