"""Incremental detokenization with stop strings, O(1) per token: TGI's and vLLM's method. Each
token decodes only a short window, the ids from ``prefix`` on (a few tokens already read, as
context) against the ids from ``prefix`` to ``read``; the difference is the new text, taken once
it ends in a whole character (a byte-level token may hold part of one). Re-decoding the whole
continuation for each streamed token cost O(n) per token, O(n^2) per answer. The context (the
prompt's last tokens at first) keeps what decoding alone would lose: the leading space a
SentencePiece or Metaspace decoder drops from the first token of a text."""

from __future__ import annotations

CONTEXT = 5
"""Prompt tokens decoded before the first new one (vLLM's ``INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET``)."""


class Detokenizer:
    """One prompt's continuation as text, cut before the first of ``stops`` (which, as OpenAI's,
    is not part of the answer); stop strings count only from ``min_tokens`` tokens on."""

    def __init__(self, decode, prompt: list[int], stops: list[str], min_tokens: int = 0):
        self.decode, self.stops, self.min_tokens = decode, stops, min_tokens
        self.ids = list(prompt[-CONTEXT:])
        self.prefix, self.read = 0, len(self.ids)
        self.text, self.tokens, self.stopped, self.released = "", 0, False, 0
        self.hold = max(map(len, stops), default=1) - 1
        """Trailing characters a stream holds back: they may be the start of a stop string."""

    def push(self, token: int) -> bool:
        """Take the next token; whether a stop string has ended the text (decoding should stop)."""
        if not self.stopped:
            self.ids.append(token)
            self.tokens += 1
            self._read(final=False)
        return self.stopped

    def finish(self, tokens: list[int]) -> str:
        """The whole text once decoding has produced ``tokens`` (those not pushed yet are)."""
        for token in tokens[self.tokens:]:
            if self.push(token):
                break
        if not self.stopped:
            self._read(final=True)
        return self.text

    def release(self, final: bool = False) -> str:
        """The text a stream may send now and has not: all but what may start a stop string
        (``final``: all of it)."""
        end = len(self.text) if final or self.stopped else max(len(self.text) - self.hold, self.released)
        new, self.released = self.text[self.released:end], end
        return new

    def _read(self, final: bool) -> None:
        head = self.decode(self.ids[self.prefix:self.read])
        whole = self.decode(self.ids[self.prefix:])
        if len(whole) <= len(head) or (whole.endswith("\ufffd") and not final):
            return  # no whole character yet
        # the tokens just read are the next window's context; older ones are never decoded again
        del self.ids[: self.read]
        self.prefix, self.read = 0, len(self.ids)
        self._extend(whole[len(head):])

    def _extend(self, new: str) -> None:
        """Append ``new``, then cut at the earliest stop string ending in it."""
        start = max(len(self.text) - self.hold, 0)
        self.text += new
        if not self.stops or self.tokens < self.min_tokens:
            return
        cuts = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
        if cuts:
            self.text, self.stopped = self.text[: min(cuts)], True
