"""Greedy and beam search against exhaustive enumeration on a model small enough to enumerate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tfspec.search import SearchOptions, search

PAD, BOS, EOS = 0, 1, 2
WORDS = [3, 4, 5]


class Markov:
    """A bigram model: the next token depends on the last one only (a table of log-probs)."""

    bos, eos, pad = BOS, EOS, PAD

    def __init__(self, seed: int):
        rng = np.random.default_rng(seed)
        logits = rng.normal(size=(6, 6)) * 2
        logits[:, [PAD, BOS]] = -np.inf  # never generated
        self.table = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)

    def start(self, src):
        return {"steps": 0}

    def step(self, state, tokens, k):
        logp = self.table[tokens[:, -1]]
        ids = np.argsort(-logp, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(logp, ids, 1), ids, {"steps": state["steps"] + 1}

    def select(self, state, rows, cross):
        return state

    def score(self, tokens: list[int], ended: bool, alpha: float, start: int = BOS) -> float:
        seq = [start, *tokens] + ([EOS] if ended else [])
        total = sum(self.table[a, b] for a, b in zip(seq, seq[1:]))
        return total / ((5 + len(seq) - 1) / 6) ** alpha


def exhaustive(model: Markov, limit: int, alpha: float, start: int = BOS) -> list[int]:
    """Best of every output after ``start``: ending with EOS at any length < limit+1, or cut at the limit."""
    best, best_score = None, -np.inf
    for length in range(limit + 1):
        for tokens in itertools.product(WORDS, repeat=length):
            for ended in ([True, False] if length == limit else [True]):
                if length == limit and ended:
                    continue  # the limit counts EOS: an ended output has at most limit-1 words
                score = model.score(list(tokens), ended, alpha, start)
                if score > best_score:
                    best, best_score = list(tokens), score
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_a_wide_beam_finds_the_exhaustive_best(seed, alpha):
    model = Markov(seed)
    src = np.array([[7, 7, PAD, PAD]])  # 2 tokens: limit 2 + max_extra
    out = search(model, src, SearchOptions(beam=200, alpha=alpha, max_extra=2))
    assert out == [exhaustive(model, 4, alpha)]


def greedy(model: Markov, limit: int, last: int = BOS) -> list[int]:
    """The likeliest token after ``last``, again and again, until EOS or ``limit`` tokens."""
    expected = []
    while len(expected) < limit:
        last = int(np.argmax(model.table[last]))
        if last == EOS:
            break
        expected.append(last)
    return expected


def test_the_length_penalty_counts_eos():
    """Two outputs, by hand: EOS at once (log-prob -1, |Y| = 1) or word 3 then EOS (|Y| = 2).
    GNMT's ((5 + |Y|) / 6)^alpha at alpha 1 divides them by 1 and 7/6."""
    model = Markov(0)
    model.table[:] = -np.inf
    model.table[BOS, EOS], model.table[BOS, 3], model.table[3, EOS] = -1.0, -0.59, -0.59
    options = SearchOptions(beam=2, alpha=1.0, max_extra=3)
    # -1 > -1.18 / (7/6) = -1.011; were |Y| to leave EOS out: -1 / (5/6) = -1.2 < -1.18
    assert search(model, np.array([[7]]), options) == [[]]
    model.table[3, EOS] = -0.55
    assert search(model, np.array([[7]]), options) == [[3]]  # -1.10 / (7/6) = -0.943 > -1
    assert search(model, np.array([[7]]), SearchOptions(beam=2, alpha=0.0, max_extra=3)) == [[]]  # raw: -1 > -1.1


def test_a_sentence_stops_once_beam_hypotheses_have_finished():
    """fairseq's early stop, by hand (beam 2, alpha 1.5): BOS -> 3 (p .5) or 4 (p .4); then 3 -> EOS
    (.5) or 5 (.45), 4 -> EOS (.6) or 3 (.35); 5 -> EOS (.99). Step 2's four best extensions are
    3 EOS (-1.39), 4 EOS (-1.43), 3 5 (-1.49), 4 3 (-1.97): two hypotheses end before the second
    word, so the sentence stops with [3] (-1.39 / (7/6)^1.5 = -1.10), though [3, 5] would score
    -1.50 / (8/6)^1.5 = -0.97 had the search gone on (the exhaustive best)."""
    model = Markov(0)
    model.table[:] = -np.inf
    for (a, b), p in {(BOS, 3): .5, (BOS, 4): .4, (3, EOS): .5, (3, 5): .45, (4, EOS): .6, (4, 3): .35,
                      (5, EOS): .99}.items():
        model.table[a, b] = np.log(p)
    assert exhaustive(model, 4, 1.5) == [3, 5]
    assert search(model, np.array([[7, 7]]), SearchOptions(beam=2, alpha=1.5, max_extra=2)) == [[3]]


@pytest.mark.parametrize("seed", range(4))
def test_greedy_follows_the_most_likely_token(seed):
    model = Markov(seed)
    src = np.array([[7, 7, 7], [7, PAD, PAD]])
    out = search(model, src, SearchOptions(beam=1, max_extra=3))
    for row, limit in zip(out, (6, 4)):
        assert row == greedy(model, limit)


@pytest.mark.parametrize("beam", [1, 3])
def test_min_length_forbids_an_early_end(beam):
    model = Markov(0)
    model.table[:, EOS] = 0.0  # EOS would always win
    model.table[:, WORDS] = -5.0
    out = search(model, np.array([[7], [7]]), SearchOptions(beam=beam, min_length=5, max_length=5))
    assert [len(o) for o in out] == [5, 5]
    assert search(model, np.array([[7]]), SearchOptions(beam=beam)) == [[]]


class Copier:
    """Copies its source, token by token, then EOS (log-prob -0.1; every other token -5): the
    state is each row's source, so a row continuing another row's state copies the wrong one."""

    bos, eos, pad = BOS, EOS, PAD

    def start(self, src):
        return src, 0

    def step(self, state, tokens, k):
        src, t = state
        copied = src[:, t] if t < src.shape[1] else np.full(len(src), EOS)
        logp = np.full((len(src), 10), -5.0)
        logp[np.arange(len(src)), np.where(copied == PAD, EOS, copied)] = -0.1
        ids = np.argsort(-logp, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(logp, ids, 1), ids, (src, t + 1)

    def select(self, state, rows, cross):
        return state[0][rows], state[1]


@pytest.mark.parametrize("beam", [1, 3])
def test_rows_keep_their_own_state_when_others_end(beam):
    """The first sentence ends first: the rows that go on must keep their own state and outputs."""
    src = np.array([[4, EOS, PAD, PAD, PAD], [3, 4, 5, 9, EOS], [5, 3, 8, EOS, PAD]])
    assert search(Copier(), src, SearchOptions(beam=beam)) == [[4], [3, 4, 5, 9], [5, 3, 8]]


def test_decoder_only_prefix_continues():
    """Each row continues its own prefix: from its last token (the bigram's only context)."""
    model = Markov(1)
    prefix = np.array([[BOS, 4], [BOS, 5]])
    out = search(model, None, SearchOptions(beam=2, max_extra=3), prefix=prefix)
    assert len(out) == 2 and all(len(o) <= 3 for o in out)
    assert search(model, None, SearchOptions(beam=1, max_extra=3), prefix=prefix) == [greedy(model, 3, 4),
                                                                                     greedy(model, 3, 5)]
    for alpha in (0.0, 0.6):
        wide = search(model, None, SearchOptions(beam=200, alpha=alpha, max_extra=3), prefix=prefix)
        assert wide == [exhaustive(model, 3, alpha, 4), exhaustive(model, 3, alpha, 5)]
    # the continuations of BOS, 4 and 5 differ (greedy or best): an ignored or swapped prefix shows
    assert len({(tuple(greedy(model, 3, s)), tuple(exhaustive(model, 3, 0.6, s))) for s in (BOS, 4, 5)}) == 3
