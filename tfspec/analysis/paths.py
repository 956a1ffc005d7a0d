"""Sequential operations and maximum path lengths (Table 1, §4), measured on position graphs.

The position graph of a stack at a concrete length n has a node (l, i) for position i after
sub-layer l (l = 0: the input), an edge (l-1, j) -> (l, i) when sub-layer l's output i reads its
input j (``Sublayer.reads``: attention's ``visible``, a convolution's taps, the position itself
for position-wise layers) and an edge (l, i-1) -> (l, i) along a recurrent layer's hidden state
(both ways when bidirectional). A path's length is its number of edges; the maximum path length
is the longest shortest path from an input position to an output position it may reach (j <= i
in a causal stack).

``position_graph`` builds that graph with networkx: the definition, and the reference the fast
methods are tested against. It has n^2 edges per full-attention layer, so the analyses run the
same breadth-first search layer by layer on numpy arrays, for all inputs at once, with no edges:
``hop_distances`` keeps an (input x position) matrix of hop counts and applies each layer as a
minimum over the window each position reads (prefix minima for full and causal attention, a
sparse table for sliding windows, shifted minima for dilated taps) and a recurrence as a running
minimum: O(n^2 log n) per layer. ``layers_to_connect`` stacks a kind until every position reaches
every other, keeping only each input's reach, an interval when the kind reads intervals: O(n log n)
per layer, so the O(n)-deep stacks of contiguous kernels stay fast at n = 1024.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import count

import networkx as nx
import numpy as np

from tfspec.errors import TfspecError


MAX_N = 4096
"""Longest sequence path lengths are measured at: the matrices are n x n."""


def _check(n: int) -> None:
    if not 1 <= n <= MAX_N:
        raise TfspecError(f"path lengths are measured on n x n matrices: n must be 1..{MAX_N} (got {n})")


@lru_cache(maxsize=64)
def reads_mask(layer, n: int, own_sequence: bool = False) -> np.ndarray:
    """Boolean (n, n), read-only: output i reads input j. ``own_sequence``: cross-attention reads
    the memory, so along its own sequence it only passes each position on (the residual)."""
    _check(n)
    if own_sequence and layer.needs_memory:
        mask = np.eye(n, dtype=bool)
    else:
        i = np.arange(n, dtype=np.int64)  # offsets such as dilation x (kernel - 1) pass 2**31
        mask = np.broadcast_to(np.asarray(layer.reads(i[:, None], i[None, :]), dtype=bool), (n, n)).copy()
    if layer.token_shift:  # its input at j holds x_j and x_{j-1}: what reads j reads j - 1 too
        mask[:, :-1] |= mask[:, 1:].copy()
    mask.flags.writeable = False
    return mask


def _windows(mask: np.ndarray):
    """(lo, hi) when each row of ``mask`` is one non-empty interval [lo_i, hi_i], else None."""
    n = mask.shape[1]
    lo, hi = mask.argmax(1), n - 1 - mask[:, ::-1].argmax(1)
    if not mask.any(1).all() or (mask.sum(1) != hi - lo + 1).any():
        return None
    return lo, hi


# The matrices below are indexed [position i, input j]: rows are gathered, which numpy does fast.

def _read(hops: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """out[i] = min of hops[j] over the inputs j that output i reads."""
    window = _windows(mask)
    if window is None:  # dilated taps: one shifted minimum per offset
        out = np.full_like(hops, np.inf)
        rows, cols = np.nonzero(mask)
        for offset in np.unique(cols - rows):
            at = rows[cols - rows == offset]
            if at[-1] - at[0] + 1 == len(at):  # a tap of a convolution: one contiguous run
                at = slice(at[0], at[-1] + 1)
                np.minimum(out[at], hops[at.start + offset:at.stop + offset], out=out[at])
            else:
                out[at] = np.minimum(out[at], hops[at + offset])
        return out
    lo, hi = window
    if not lo.any():  # full and causal attention read prefixes
        return np.minimum.accumulate(hops, axis=0)[hi]
    out = np.empty_like(hops)
    level = np.log2(hi - lo + 1).astype(int)  # sparse table: level p holds minima of 2^p rows
    table = hops
    for p in range(int(level.max()) + 1):
        if p:
            half = 1 << (p - 1)
            table = np.minimum(table[:-half], table[half:])
        rows = np.nonzero(level == p)[0]
        out[rows] = np.minimum(table[lo[rows]], table[hi[rows] - (1 << p) + 1])
    return out


def _recur(layer, hops: np.ndarray) -> np.ndarray:
    """Follow the hidden-state chain: from position j to i costs |i - j| more hops."""
    if layer.recurrence is None:
        return hops
    steps = np.arange(hops.shape[0], dtype=hops.dtype)[:, None]
    out = np.minimum.accumulate(hops - steps, axis=0) + steps
    if layer.recurrence == "both":
        back = np.minimum.accumulate((hops + steps)[::-1], axis=0)[::-1] - steps
        out = np.minimum(out, back)
    return out


def is_causal(layers, n: int, own_sequence: bool = False) -> bool:
    """Whether no output reads a later position (then only pairs j <= i count)."""
    return all(layer.recurrence != "both" and not np.triu(reads_mask(layer, n, own_sequence), 1).any()
               for layer in layers)


def hop_distances(layers, n: int, own_sequence: bool = False) -> np.ndarray:
    """(n, n) shortest hop counts from input j (row) to output i (column); inf: unreachable."""
    _check(n)
    hops = np.where(np.eye(n, dtype=bool), np.float32(0), np.float32(np.inf))
    for layer in layers:
        hops = _recur(layer, _read(hops, reads_mask(layer, n, own_sequence)) + 1)
    return hops.T


@dataclass(frozen=True)
class Paths:
    """Path lengths of one stack at one n."""

    n: int
    causal: bool
    longest: int | None
    """Longest shortest path over the pairs the stack may connect; None if some are not connected."""
    reach: int
    """Largest distance |i - j| between an input and an output it reaches."""


def summarize(dist: np.ndarray, causal: bool) -> Paths:
    """Longest path and reach over the pairs a stack may connect (j <= i when causal)."""
    n = dist.shape[0]
    allowed = np.triu(np.ones((n, n), dtype=bool)) if causal else np.ones((n, n), dtype=bool)
    finite = np.isfinite(dist) & allowed
    gap = np.abs(np.arange(n)[None, :] - np.arange(n)[:, None])
    longest = int(dist[finite].max()) if finite[allowed].all() else None
    return Paths(n, causal, longest, int(gap[finite].max()) if finite.any() else 0)  # 0: taps all in padding


def stack_paths(layers, n: int) -> Paths:
    """Path lengths along one stack's own sequence (cross-attention reads the memory)."""
    return summarize(hop_distances(layers, n, own_sequence=True), is_causal(layers, n, own_sequence=True))


def layers_to_connect(layer, n: int) -> int | None:
    """How many layers of this kind, stacked (``at_depth``), connect every input to every output
    it may reach; None if stacking never does (position-wise layers)."""
    _check(n)
    causal = is_causal([layer], n)
    allowed = np.triu(np.ones((n, n), dtype=bool)) if causal else np.ones((n, n), dtype=bool)
    lo = hi = np.arange(n)
    dist, mask, previous = None, None, None
    for depth in count():
        current = layer.at_depth(depth)
        if current is not previous:
            mask, previous = reads_mask(current, n), current
            window = _windows(mask)
            monotone = window is not None and (np.diff(window[0]) >= 0).all() and (np.diff(window[1]) >= 0).all()
        if dist is None and monotone:  # reach of each input: an interval
            new_lo = np.searchsorted(window[1], lo)  # first output whose window ends at or after lo
            new_hi = np.searchsorted(window[0], hi, side="right") - 1  # last one starting at or before hi
            if current.recurrence is not None:
                new_hi = np.full(n, n - 1)
                new_lo = np.zeros(n, dtype=int) if current.recurrence == "both" else new_lo
            grew = (new_lo != lo).any() or (new_hi != hi).any()
            lo, hi = new_lo, new_hi
            done = (hi == n - 1).all() and (causal or not lo.any())
        else:  # general reach: a 0/inf matrix through the same layer operations
            if dist is None:  # [position, input], as _read takes it
                rows = np.arange(n)[:, None]
                dist = np.where((rows >= lo[None, :]) & (rows <= hi[None, :]), np.float32(0), np.float32(np.inf))
            new = np.where(np.isfinite(_recur(current, _read(dist, mask))), np.float32(0), np.float32(np.inf))
            grew, dist = (new != dist).any(), new
            done = np.isfinite(dist.T[allowed]).all()
        if done:
            return depth + 1
        if not grew:
            return None


def path_length(layer, n: int) -> int | None:
    """Maximum path length of the shallowest stack of this kind that connects all positions."""
    depth = layers_to_connect(layer, n)
    if depth is None:
        return None
    layers = [layer.at_depth(i) for i in range(depth)]
    if all(x.recurrence is None for x in layers):
        return depth  # every edge climbs one layer: every input-to-output path has depth hops
    return summarize(hop_distances(layers, n), is_causal(layers, n)).longest


def sequential_ops(layer, n: int) -> int:
    """The longest chain of steps that must run one after another in one layer unrolled over n
    positions (§4): a recurrence chains its steps (two independent chains when bidirectional);
    attention, convolution and position-wise layers compute every position at once."""
    unrolled = nx.DiGraph()
    unrolled.add_nodes_from((0, i) for i in range(n))
    if layer.recurrence is not None:
        unrolled.add_edges_from(((0, i - 1), (0, i)) for i in range(1, n))
    if layer.recurrence == "both":
        unrolled.add_edges_from(((1, i), (1, i - 1)) for i in range(1, n))
    return nx.dag_longest_path_length(unrolled) + 1


def position_graph(layers, n: int, own_sequence: bool = False) -> nx.DiGraph:
    """The position graph itself, every edge explicit (n^2 per full-attention layer)."""
    graph = nx.DiGraph()
    graph.add_nodes_from((0, i) for i in range(n))
    for depth, layer in enumerate(layers, 1):
        rows, cols = np.nonzero(reads_mask(layer, n, own_sequence))
        graph.add_edges_from(((depth - 1, int(j)), (depth, int(i))) for i, j in zip(rows, cols))
        if layer.recurrence is not None:
            graph.add_edges_from(((depth, i - 1), (depth, i)) for i in range(1, n))
        if layer.recurrence == "both":
            graph.add_edges_from(((depth, i), (depth, i - 1)) for i in range(1, n))
    return graph


def graph_distances(graph: nx.DiGraph, depth: int, n: int) -> np.ndarray:
    """``hop_distances`` read off a ``position_graph`` by networkx's breadth-first search."""
    dist = np.full((n, n), np.inf)
    for j in range(n):
        for (layer, i), hops in nx.single_source_shortest_path_length(graph, (0, j)).items():
            if layer == depth:
                dist[j, i] = hops
    return dist
