"""What a request asks of each step beyond ``SearchOptions``: OpenAI's presence and frequency
penalties and ``logit_bias`` reshape a row's log-probabilities before it picks, and ``logprobs``
reports each picked token's log-probability with the likeliest alternatives (the model's own,
before any reshaping, as vLLM reports them by default).

A penalty is subtracted from a token's logit; the step gives log-probabilities, which differ
from the logits by one constant per row, so picking (greedy or drawn after a softmax) is the
same either way."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WHOLE_VOCABULARY = np.iinfo(np.int32).max
"""Candidates a reshaping row asks each step for: all of them (decoders clamp k)."""


@dataclass(frozen=True)
class Tweaks:
    presence: float = 0.0
    """Taken from a token's logit once it appears in the continuation (OpenAI's presence_penalty)."""
    frequency: float = 0.0
    """Taken from a token's logit per appearance (OpenAI's frequency_penalty)."""
    bias: tuple[tuple[int, float], ...] = ()
    """(token id, added to its logit) (OpenAI's logit_bias)."""
    logprobs: int | None = None
    """Alternatives reported with each token's log-probability; None: none reported."""

    @property
    def reshapes(self) -> bool:
        return bool(self.presence or self.frequency or self.bias)

    @property
    def candidates(self) -> int:
        """Candidates one step must return for this row beyond what picking needs."""
        return WHOLE_VOCABULARY if self.reshapes else self.logprobs or 0


class Shaper:
    """One row's running adjustment of the vocabulary's log-probabilities, updated per token
    taken, so a step costs one gather of the candidates' entries."""

    def __init__(self, tweaks: Tweaks, vocab: int):
        self.tweaks, self.adjust, self.seen = tweaks, np.zeros(vocab, np.float32), set()
        self.lowered, self.raised = set(), set()
        """Tokens whose adjustment is below zero, and above."""
        for token, bias in tweaks.bias:
            self.adjust[token] += bias
            self._file(token)

    def __call__(self, values: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """``values`` (k,) of candidates ``ids`` (k,), reshaped."""
        return values + self.adjust[ids]

    def candidates(self, k: int) -> int:
        """Candidates a step must return so that the row's ``k`` likeliest after reshaping are
        among them. Lowering tokens only moves those down: the ``k`` likeliest reshaped are among
        the ``k`` + (tokens lowered) likeliest as the step gives them. A raised token may come
        from anywhere in the vocabulary, so then all of it (``WHOLE_VOCABULARY``)."""
        return WHOLE_VOCABULARY if self.raised else k + len(self.lowered)

    def took(self, token: int) -> None:
        self.adjust[token] -= self.tweaks.frequency + (self.tweaks.presence if token not in self.seen else 0.0)
        self.seen.add(token)
        self._file(token)

    def _file(self, token: int) -> None:
        value = self.adjust[token]
        for group, member in ((self.lowered, value < 0), (self.raised, value > 0)):
            (group.add if member else group.discard)(token)


def score(token: int, values: np.ndarray, ids: np.ndarray, top: int) -> tuple:
    """(token, its log-probability, the ``top`` likeliest as (id, log-probability)) of one step."""
    where = np.flatnonzero(ids == token)
    own = float(values[where[0]]) if where.size else float("-inf")
    return token, own, [(int(i), float(v)) for i, v in zip(ids[:top], values[:top])]


def completion_logprobs(text, scores: list, first: int, offset: int) -> dict:
    """``/v1/completions``' ``logprobs`` object of ``scores``, tokens ``first``, ``first`` + 1, ...
    of ``text`` (a ``Detokenizer``), their pieces as tokens: offsets count characters of the
    choice's text, the first token's at ``offset``."""
    pieces = text.pieces[first:first + len(scores)]
    offsets = np.cumsum([offset] + [len(p) for p in pieces])[:-1].tolist()
    return {"tokens": pieces, "token_logprobs": [lp for _, lp, _ in scores],
            "top_logprobs": [_by_text(text.spell(first + i, [t for t, _ in top]), top)
                             for i, (_, _, top) in enumerate(scores)],
            "text_offset": offsets}


def _by_text(spelled: list[str], top: list) -> dict:
    """{text: log-probability} of ``top`` (likeliest first) spelled so; two that read alike
    (parts of one UTF-8 character) keep the likelier's."""
    out = {}
    for piece, (_, logprob) in zip(spelled, top):
        out.setdefault(piece, logprob)
    return out


def chat_logprobs(text, scores: list, first: int) -> dict:
    """``/v1/chat/completions``' ``logprobs`` object of ``scores`` (as ``completion_logprobs``):
    each token's piece and its UTF-8 bytes, so that the bytes joined are the content's."""
    def entry(piece: str, logprob: float) -> dict:
        return {"token": piece, "logprob": logprob, "bytes": list(piece.encode())}

    content = []
    for i, (_, logprob, top) in enumerate(scores):
        spelled = text.spell(first + i, [t for t, _ in top])
        content.append(entry(text.pieces[first + i], logprob)
                       | {"top_logprobs": [entry(p, v) for p, (_, v) in zip(spelled, top)]})
    return {"content": content}
