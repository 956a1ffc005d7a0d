"""``tidy``: repeated nodes merged and unread ones dropped, the graph computing what it did.

References: onnx's reference evaluator (``onnx.reference``) on the graph before and after, and
onnxruntime on a graph whose Loop body reads a tensor from outside.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tfspec import load_spec
from tfspec.backends.onnx import export
from tfspec.backends.onnx.passes.tidy import tidy
from tfspec.backends.torch import build_module

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def model(nodes, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def test_repeats_merged_and_unread_nodes_dropped_compute_the_same():
    two = numpy_helper.from_array(np.float32([2.0]), "two")
    unread = numpy_helper.from_array(np.float32([5.0]), "unread")
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"]),
             helper.make_node("Mul", ["x", "two"], ["b"]),  # the same as a
             helper.make_node("Shape", ["x"], ["s1"], start=1),
             helper.make_node("Shape", ["x"], ["s2"], start=0),  # not the same: another attribute
             helper.make_node("Add", ["x", "unread"], ["dead"]),  # nothing reads it
             helper.make_node("Relu", ["dead"], ["deader"]),
             helper.make_node("Add", ["a", "b"], ["y"]),
             helper.make_node("Cast", ["s1"], ["f1"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["s2"], ["f2"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "two"], ["z"])]  # a graph output: kept under its name
    m = model(nodes, ["y", "f1", "f2", "z"], [two, unread])
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": x})
    assert tidy(m.graph) == 3  # b, dead and deader (and the initializer only dead read), no more
    assert Counter(n.op_type for n in m.graph.node) == {"Mul": 2, "Shape": 2, "Add": 1, "Cast": 2}
    assert [t.name for t in m.graph.initializer] == ["two"]
    for a, b in zip(want, ReferenceEvaluator(m).run(None, {"x": x})):
        np.testing.assert_array_equal(a, b)


def test_a_tensor_a_subgraph_reads_keeps_its_name():
    """A Loop body reads ``b`` from outside: the repeat of ``a`` that made it must stay."""
    ort = pytest.importorskip("onnxruntime")
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "b"], ["acc_out"]), helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("acc", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2, 3])])
    trips = numpy_helper.from_array(np.int64(3), "trips")
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["x"], ["b"]),
             helper.make_node("Loop", ["trips", "", "a"], ["y"], body=body)]
    m = model(nodes, ["y"], [trips])
    assert tidy(m.graph) == 0
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, 4 * np.maximum(x, 0), rtol=1e-6)


@pytest.mark.parametrize("fused", [False, True])
def test_exported_graphs_hold_no_repeated_or_unread_node(fused, tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    export(build_module(load_spec("tiny")), tmp_path, parity=False, fused=fused)
    for path in tmp_path.glob("*.onnx"):
        graph = onnx.load(str(path)).graph
        count = len(graph.node)
        assert tidy(graph) == 0 and len(graph.node) == count, path.name
