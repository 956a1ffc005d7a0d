"""Decoding over the shortlist step graph (``export --shortlist``, ``translate --shortlist``).

Each batch binds the union of its sources' candidates (``tfspec.shortlist``) as the step
graph's ``candidates`` input: the output projection reads only their rows and the softmax is
normalised over them (as CTranslate2's vocabulary map and Marian's shortlists do), and
``top_ids`` come back as vocabulary ids, so ``tfspec.search`` runs unchanged.
"""

from __future__ import annotations

import numpy as np

from tfspec.checks import Check
from tfspec.errors import TfspecError
from tfspec.shortlist import load
from tfspec.untrusted import file_name

from .decoding import OnnxDecoder

GRAPH = "decoder_shortlist"


class ShortlistDecoder(OnnxDecoder):
    """``OnnxDecoder`` whose steps score only the candidates of the batch's sources."""

    def __init__(self, model):
        self.shortlist = open_shortlist(model)
        if GRAPH not in model.sessions:
            model._open(GRAPH)
        super().__init__(model, model.sessions[GRAPH])
        self.candidates = self.shortlist.always

    def start(self, src: np.ndarray | None, mask: np.ndarray | None = None):
        if src is None:
            raise TfspecError("--shortlist: a shortlist maps source tokens to targets; this model has no sources")
        self.candidates = np.ascontiguousarray(self.shortlist.candidates(src), np.int64)
        self.vocab, self._top_k = len(self.candidates), {}  # top_k is clamped to the candidates
        return super().start(src, mask)

    def run(self, state, tokens: np.ndarray, outputs: list[str], k: int = 1, mask: np.ndarray | None = None):
        self.binding.bind_cpu_input("candidates", self.candidates)
        return super().run(state, tokens, outputs, k, mask)


def open_shortlist(model):
    """The export's shortlist, checked; refused by name when the export has none."""
    entry, graphs = model.manifest.get("shortlist"), model.manifest["graphs"]
    if entry is None and GRAPH not in graphs:
        raise TfspecError(f"{model.directory}: exported without a shortlist; re-export with "
                          "`tfspec export ... --shortlist CORPUS_DIR` (or translate without --shortlist)")
    if not isinstance(entry, dict) or not file_name(entry.get("file")) or GRAPH not in graphs:
        raise TfspecError(f"{model.directory}: corrupt manifest ('shortlist' must name the shortlist file, and "
                          f"'graphs' hold {GRAPH}); re-export the model")
    vocab = model.spec.vocab
    return load(model.directory / entry["file"], vocab.size, vocab.tgt_size)


def check_shortlist(model, seed: int = 0, steps: int = 3) -> Check:
    """The shortlist step graph's log-probabilities against the step graph's, renormalised over
    the same candidates, over a few steps of random sources and targets."""
    rng, spec = np.random.default_rng(seed), model.spec
    src = rng.integers(4, spec.vocab.size, (3, 11))
    full, short = model.decoder(static=False), ShortlistDecoder(model)
    states = [full.start(src), short.start(src)]
    tokens, worst = np.full((3, 1), spec.vocab.bos_id, np.int64), 0.0
    for _ in range(steps):
        (lp_full, states[0]), (lp_short, states[1]) = (d.run(s, tokens, ["log_probs"]) for d, s in zip(
            (full, short), states))
        picked = lp_full[:, short.candidates].astype(np.float64)
        want = picked - np.logaddexp.reduce(picked, axis=1, keepdims=True)
        worst = max(worst, float(np.abs(want - lp_short).max()))
        tokens = rng.choice(short.candidates, (3, 1))
    tolerance = 5e-2 if model.dtype == np.float16 else 1e-4
    return Check(f"shortlist step graph vs step graph at {len(short.candidates)} candidates, {steps} steps",
                 worst, tolerance)
