"""Incremental detokenization with stop strings, O(1) per token: TGI's and vLLM's method, and
the one reading of a continuation that streams, unary answers and log-probabilities share.

Each token decodes only a short window, the ids read last (as context) against those ids and
the ones after them; the difference is the token's *piece*, the new text, taken once it ends in
a whole character (a byte-level or byte-fallback token may hold part of one: its piece is empty
and the token that completes the character carries it). Re-decoding the whole continuation for
each streamed token cost O(n) per token, O(n^2) per answer; decoding each token alone loses
what only its context shows: SentencePiece's and Metaspace's leading space (``▁the`` alone reads
"the"), and the bytes of a character split over several tokens. The context (the prompt's last
tokens at first) keeps both, so the pieces joined are the text, token by token, and
``text[offset:]`` starts with each token's piece at its offset (``logits.completion_logprobs``)."""

from __future__ import annotations

CONTEXT = 5
"""Prompt tokens decoded before the first new one (vLLM's ``INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET``)."""
PARTIAL = "\ufffd"
"""What a decoder writes for the bytes of a character not complete yet."""


def _context(decode, prompt: list[int]) -> list[int]:
    """The prompt's last ``CONTEXT`` tokens, or a few more where those begin inside a character
    (a byte-fallback decoder turns a whole run of bytes to U+FFFD when its start is missing)."""
    start = max(len(prompt) - CONTEXT, 0)
    for _ in range(3):  # a UTF-8 character is 4 bytes at most
        if start == 0 or not decode(prompt[start:]).startswith(PARTIAL):
            break
        start -= 1
    return list(prompt[start:])


class Detokenizer:
    """One prompt's continuation as text, cut before the first of ``stops`` (which, as OpenAI's,
    is not part of the answer); stop strings count only from ``min_tokens`` tokens on.
    ``decode`` None (an export without a tokenizer): every token reads as no text."""

    def __init__(self, decode, prompt: list[int], stops: list[str], min_tokens: int = 0):
        self.decode, self.stops, self.min_tokens = decode, stops, min_tokens
        self.ids = _context(decode, prompt) if decode is not None else []
        self.read = len(self.ids)
        """``ids[:read]`` are read (the next piece's context), the rest wait for a whole character."""
        self.text, self.stopped, self.released = "", False, 0
        self.taken: list[int] = []
        self.pieces: list[str] = []
        """Each token taken, and its share of ``text``: ``"".join(pieces) == text``."""
        self.windows: list[tuple[tuple[int, ...], int]] = []
        """Each token's place: the ids before it in the window, and how many of them are read (``spell``)."""
        self.settled, self.settled_chars = 0, 0
        """Tokens whose pieces are final and within the released text, and their characters."""
        self.hold = max(map(len, stops), default=1) - 1
        """Trailing characters a stream holds back: they may be the start of a stop string."""

    @property
    def tokens(self) -> int:
        """Tokens taken (pushed before a stop string ended the text)."""
        return len(self.taken)

    def push(self, token: int) -> bool:
        """Take the next token; whether a stop string has ended the text (decoding should stop)."""
        if not self.stopped:
            self.windows.append((tuple(self.ids), self.read))
            self.taken.append(token)
            self.pieces.append("")
            if self.decode is not None:
                self.ids.append(token)
                self._read(final=False)
        return self.stopped

    def finish(self, tokens: list[int]) -> str:
        """The whole text once decoding has produced ``tokens`` (those not pushed yet are)."""
        for token in tokens[self.tokens:]:
            if self.push(token):
                break
        if not self.stopped and self.decode is not None:
            self._read(final=True)
        return self.text

    def release(self, final: bool = False) -> str:
        """The text a stream may send now and has not: all but what may start a stop string
        (``final``: all of it). ``settled`` then counts the tokens whose pieces it holds."""
        end = len(self.text) if final or self.stopped else max(len(self.text) - self.hold, self.released)
        new, self.released = self.text[self.released:end], end
        read = self.tokens - (len(self.ids) - self.read)  # the tokens still waiting for a whole character are not
        while self.settled < read and self.settled_chars + len(self.pieces[self.settled]) <= end:
            self.settled_chars += len(self.pieces[self.settled])
            self.settled += 1
        return new

    def spell(self, i: int, candidates: list[int]) -> list[str]:
        """The piece each of ``candidates`` would have read in token ``i``'s place, as ``i``'s
        own was read (empty where it leaves a character incomplete): the alternatives that
        log-probabilities report, spelled with their leading spaces."""
        if self.decode is None:
            return [""] * len(candidates)
        window, read = self.windows[i]
        head = self.decode(list(window[:read]))
        spelled = []
        for token in candidates:
            whole = self.decode([*window, token])
            spelled.append(whole[len(head):] if len(whole) > len(head) and not whole.endswith(PARTIAL) else "")
        return spelled

    def _read(self, final: bool) -> None:
        head = self.decode(self.ids[:self.read])
        whole = self.decode(self.ids)
        if len(whole) <= len(head) or (whole.endswith(PARTIAL) and not final):
            return  # no whole character yet
        # the tokens just read are the next window's context; older ones are never decoded again
        del self.ids[: self.read]
        self.read = len(self.ids)
        self._extend(whole[len(head):])

    def _extend(self, new: str) -> None:
        """Append ``new`` (the last token's piece), then cut at the earliest stop string ending in it."""
        start = max(len(self.text) - self.hold, 0)
        self.text += new
        self.pieces[-1] += new
        if not self.stops or self.tokens < self.min_tokens:
            return
        cuts = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
        if cuts:
            self.text, self.stopped = self.text[: min(cuts)], True
            self._trim()

    def _trim(self) -> None:
        """The pieces cut where the text was: the last ones lose what a stop string took."""
        over, i = sum(map(len, self.pieces)) - len(self.text), len(self.pieces) - 1
        while over > 0:
            cut = min(over, len(self.pieces[i]))
            self.pieces[i], over, i = self.pieces[i][:len(self.pieces[i]) - cut], over - cut, i - 1
