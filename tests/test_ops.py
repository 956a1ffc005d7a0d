"""IR ops are declared once (``tfspec/ir/ops``) and every consumer asks the declaration: each op
is lowered by both backends, counted by every analysis, and a definition or a graph missing a
piece fails by name instead of counting a silent zero."""

from __future__ import annotations

import pytest

from tfspec import build_graph, load_spec
from tfspec.analysis import train_memory
from tfspec.analysis.flops import SYMBOLS
from tfspec.errors import TfspecError
from tfspec.ir import Graph
from tfspec.ir.ops import OPS, Op, definition, every, register
from tfspec.registry import discover
from tests.conftest import SHIPPED

LOWERED = sorted(name for name, op in every().items() if not op.fed)


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_every_op_is_lowered_by_the_backend(backend):
    package = f"tfspec.backends.{backend}"
    discover(package if backend == "torch" else f"{package}.lower")  # the ONNX lowerings' own package
    table = __import__(f"{package}.{'registry' if backend == 'torch' else 'lower'}", fromlist=["LOWERINGS"])
    assert [op for op in LOWERED if op not in table.LOWERINGS] == []
    assert sorted(set(table.LOWERINGS) - set(every())) == []  # no lowering of an op nobody defines


@pytest.mark.parametrize("missing", ["flops", "saved"])
def test_a_definition_stating_no_flops_or_saved_tensors_is_refused_by_name(missing):
    stated = {"flops": staticmethod(lambda node, s, dense=False: {}),
              "saved": staticmethod(lambda graph, node, sizes, out: {})}
    del stated[missing]
    throwaway = type("Throwaway", (Op,), {"name": "throwaway_op", **stated})
    with pytest.raises(TypeError, match=f"'throwaway_op'.*states no {missing}"):
        register(throwaway)
    assert "throwaway_op" not in OPS


def test_a_graph_naming_an_op_without_definition_fails_by_name():
    with pytest.raises(TfspecError, match="'warp' has no definition"):
        Graph("g").add_op("x", "warp", [], ("B", "T", 4))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_analysis_counts_every_op_of_a_shipped_spec(name):
    """Each node's definition answers FLOPs (expressions in the analysis symbols), saved bytes
    (positive integers) and its cache width, and the FLOP report counts every op with products."""
    graph = build_graph(load_spec(name))
    sizes = {"B": 2, "S": 16, "T": 16}
    for node in graph.nodes():
        op = definition(node.op)
        assert set().union(*(e.free_symbols for e in op.flops(node, SYMBOLS).values())) <= set(vars(SYMBOLS).values())
        assert all(isinstance(v, int) and v >= 0 for v in train_memory._saved(graph, node, sizes).values())
        assert op.cached(node) is None or op.cached(node) > 0
