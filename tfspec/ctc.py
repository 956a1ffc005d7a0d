"""Decoding CTC outputs (Graves et al. 2006, §3.2) and scoring them: backend-neutral numpy.

A CTC model gives, per frame t, log-probabilities ``log_probs[t, k]`` of every label and of
the blank. A path (one class per frame) maps to a labelling by merging repeats and then
dropping blanks (the many-to-one map B of §3.1), and a labelling's probability is the sum
over its paths. Best-path decoding (eq. 14) takes the most probable path; prefix beam search
keeps the ``beam`` labelling prefixes of highest summed probability, which finds the most
probable labelling itself whenever the beam holds every prefix that leads to it.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np


def greedy(log_probs: np.ndarray, blank: int = 0) -> list[int]:
    """Best path decoding: the most probable class of every frame, repeats merged, blanks dropped."""
    best = np.asarray(log_probs).argmax(axis=-1)
    return [int(k) for i, k in enumerate(best) if k != blank and (i == 0 or k != best[i - 1])]


def prefix_beam_search(log_probs: np.ndarray, beam: int = 8, blank: int = 0) -> list[int]:
    """The labelling of highest probability among those the beam keeps (Graves 2006 §3.2's
    prefix search, pruned to ``beam`` prefixes per frame as in Hannun et al. 2014).

    Each prefix carries two log-probabilities over the frames so far: of the paths that end in
    a blank and of those that end in its last label. A label equal to the prefix's last one
    extends it only after a blank; without one it merges into the last label.
    """
    log_probs = np.asarray(log_probs, dtype=np.float64)
    beams: dict[tuple[int, ...], tuple[float, float]] = {(): (0.0, -np.inf)}  # prefix -> (ends blank, ends label)
    for frame in log_probs:
        grown: dict[tuple[int, ...], list[float]] = defaultdict(lambda: [-np.inf, -np.inf])
        for prefix, (b, nb) in beams.items():
            either = np.logaddexp(b, nb)
            stay = grown[prefix]
            stay[0] = np.logaddexp(stay[0], either + frame[blank])
            if prefix:  # the last label repeated: the same prefix
                stay[1] = np.logaddexp(stay[1], nb + frame[prefix[-1]])
            for k in range(len(frame)):
                if k == blank:
                    continue
                extended = grown[prefix + (k,)]
                before = b if prefix and k == prefix[-1] else either
                extended[1] = np.logaddexp(extended[1], before + frame[k])
        kept = sorted(grown.items(), key=lambda item: np.logaddexp(*item[1]), reverse=True)[:beam]
        beams = {prefix: (b, nb) for prefix, (b, nb) in kept}
    return list(max(beams.items(), key=lambda item: np.logaddexp(*item[1]))[0])


def edit_distance(a, b) -> int:
    """Levenshtein distance: insertions, deletions and substitutions, each costing 1."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def character_error_rate(hypotheses, references) -> float:
    """Edit operations turning the hypotheses into the references, over the references' length."""
    edits = sum(edit_distance(h, r) for h, r in zip(hypotheses, references, strict=True))
    return edits / max(1, sum(len(r) for r in references))
