"""Sequential operations and path lengths: fast layer-by-layer search vs networkx on the explicit
position graph, and growth over n = 16..1024 against hand-derived closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tfspec.analysis.complexity import NS, layer_facts
from tfspec.analysis.flops import describe
from tfspec.analysis.paths import (graph_distances, hop_distances, layers_to_connect, path_length,
                                   position_graph, sequential_ops, stack_paths)
from tfspec.errors import TfspecError
from tfspec.layers import SUBLAYERS


def layer(kind, **options):
    return SUBLAYERS[kind](kind=kind, **options)


KINDS = [layer("self_attention"), layer("causal_self_attention"), layer("cross_attention"), layer("ffn"),
         layer("restricted_self_attention", r=2), layer("restricted_self_attention", r=3, causal=True),
         layer("recurrent"), layer("recurrent", cell="gru", bidirectional=True),
         layer("conv", kernel=3), layer("conv", kernel=4), layer("conv", kernel=3, causal=True),
         layer("conv", kernel=2, dilation=3), layer("conv", kernel=3, dilation=2, causal=True, separable=True)]


@pytest.mark.parametrize("stack", [[k] for k in KINDS] + [
    [KINDS[4], KINDS[6], KINDS[8]], [KINDS[5], KINDS[10], KINDS[6]], [KINDS[11], KINDS[7], KINDS[3], KINDS[11]],
    [KINDS[2], KINDS[1], KINDS[12], KINDS[12].at_depth(2)]], ids=lambda s: "+".join(map(describe, s)))
@pytest.mark.parametrize("own_sequence", [False, True])
def test_fast_search_equals_networkx_on_the_position_graph(stack, own_sequence):
    n = 17
    graph = position_graph(stack, n, own_sequence)
    np.testing.assert_array_equal(hop_distances(stack, n, own_sequence), graph_distances(graph, len(stack), n))


@pytest.mark.parametrize("kind", KINDS, ids=describe)
@pytest.mark.parametrize("n", [2, 9, 20])
def test_layers_to_connect_is_the_shallowest_connected_stack(kind, n):
    """Against networkx: grow the explicit position graph one layer at a time."""
    causal = not np.triu(kind.reads(np.arange(n)[:, None], np.arange(n)[None, :]), 1).any() \
        and kind.recurrence != "both"
    allowed = np.triu(np.ones((n, n), dtype=bool)) if causal else np.ones((n, n), dtype=bool)
    expected = None
    for depth in range(1, n + 2):
        stack = [kind.at_depth(i) for i in range(depth)]
        if np.isfinite(graph_distances(position_graph(stack, n), depth, n)[allowed]).all():
            expected = depth
            break
    assert layers_to_connect(kind, n) == expected


# Closed forms derived by hand: the shallowest connecting stack's longest shortest path at n.
GROWTH = [
    (layer("self_attention"), lambda n: 1, "O(1)"),
    (layer("causal_self_attention"), lambda n: 1, "O(1)"),
    (layer("recurrent"), lambda n: n, "O(n)"),  # enter at 0, n - 1 steps along the chain
    (layer("recurrent", bidirectional=True), lambda n: n, "O(n)"),
    (layer("restricted_self_attention", r=4), lambda n: math.ceil((n - 1) / 4), "O(n/r)"),
    (layer("restricted_self_attention", r=8, causal=True), lambda n: math.ceil((n - 1) / 8), "O(n/r)"),
    (layer("conv", kernel=3), lambda n: n - 1, "O(n/k)"),  # one position each way per layer
    (layer("conv", kernel=5, causal=True), lambda n: math.ceil((n - 1) / 4), "O(n/k)"),
    # causal taps 0, 3^l, 2*3^l: L layers reach 3^L - 1 back.
    (layer("conv", kernel=3, dilation=3, causal=True), lambda n: math.ceil(math.log(n, 3) - 1e-9), "O(log_k(n))"),
    (layer("conv", kernel=2, dilation=2, causal=True), lambda n: math.ceil(math.log2(n)), "O(log_k(n))"),
]


@pytest.mark.parametrize("kind,closed_form,expected", GROWTH, ids=[describe(g[0]) for g in GROWTH])
def test_path_lengths_grow_as_table1_says(kind, closed_form, expected):
    facts = layer_facts(kind)
    assert list(facts.paths_measured) == [closed_form(n) for n in NS]
    assert facts.max_path_length == expected


def test_position_wise_layers_never_connect():
    assert layer_facts(layer("ffn")).max_path_length is None and path_length(layer("ffn"), 64) is None


@pytest.mark.parametrize("kind,expected", [
    (layer("recurrent"), "n"), (layer("recurrent", cell="rnn", bidirectional=True), "n"), (layer("self_attention"), 1),
    (layer("conv", kernel=3), 1), (layer("restricted_self_attention", r=2), 1), (layer("ffn"), 1)],
    ids=lambda v: describe(v) if hasattr(v, "kind") else str(v))
def test_sequential_operations(kind, expected):
    for n in (1, 16, 1024):
        assert sequential_ops(kind, n) == (n if expected == "n" else 1)
    assert layer_facts(kind).sequential_ops == ("O(n)" if expected == "n" else "O(1)")


@pytest.mark.parametrize("depth,r,n", [(3, 4, 40), (3, 4, 13), (6, 2, 10), (2, 5, 64)])
def test_stack_of_restricted_layers_connects_within_depth_times_r(depth, r, n):
    paths = stack_paths([layer("restricted_self_attention", r=r)] * depth, n)
    assert paths.reach == min(n - 1, depth * r)
    assert paths.longest == (depth if n - 1 <= depth * r else None)


def test_decoder_stack_paths_count_every_sublayer_and_follow_causality():
    stack = [layer("causal_self_attention"), layer("cross_attention"), layer("ffn")] * 2
    paths = stack_paths(stack, 25)
    assert paths.causal and paths.longest == 6 and paths.reach == 24
    rnn = stack_paths([layer("recurrent"), layer("ffn")], 25)
    assert rnn.longest == 25 + 1  # n hops through the recurrence, one through the FFN


def test_too_long_for_path_analysis_is_a_clear_error():
    with pytest.raises(TfspecError, match="n must be"):
        stack_paths([layer("self_attention")], 10**6)
