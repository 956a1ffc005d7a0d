"""A small ONNX graph builder over ``onnx.helper``, and symbolic index arithmetic.

``Builder.op`` appends a node and returns its output name(s). ``Index`` wraps an int64
tensor so an attention kind's ``visible(q, k)`` (written with Python operators only, see
``tfspec.layers.attention``) emits ONNX comparison nodes: the mask is defined once, in the
layer's module, for every backend.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .passes.tidy import tidy

FLOAT_TYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}
POINTWISE = {"Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "Gelu", "Erf", "Sqrt", "Cast",
             "LayerNormalization", "RMSNormalization"}
"""Ops whose output has their first input's layout (flat or not): elementwise, or along the
last axis."""


class Builder:
    """Collects nodes, initializers, inputs and outputs of one ONNX graph."""

    def __init__(self, name: str, opset: int, dtype: str, weights: dict[str, np.ndarray], quant=None, sink=None):
        self.name, self.opset, self.dtype = name, opset, dtype
        self.quant = quant
        """``int4.Int4`` (projections as MatMulNBits, quantised tables) or ``int8.Int8`` (every
        constant-weight product int8); None: float weights."""
        self.sink = sink
        """``external.ExternalData``: initializers written to one data file as they are made
        (the proto holds references only); None: initializers held in the proto."""
        self.np_dtype = np.dtype(dtype)
        self.elem_type = FLOAT_TYPES[dtype]
        self.weights = weights
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, onnx.TensorProto] = {}
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.shapes: list[onnx.ValueInfoProto] = []
        """Shapes of the outputs of onnxruntime's own ops, which onnx's shape inference cannot
        infer (``fused`` reads shapes past them)."""
        self.scope = ""
        self._count = 0
        self._consts: dict[tuple, str] = {}
        self._shapes: dict[tuple, str] = {}
        self.batch: str | None = None
        """int64 (1,): the batch size, read once from the first token input."""
        self.flat: set[str] = set()
        """Names holding a (B * L, features) view of a (B, L, features) sequence: the residual
        stream between layers stays 2-D, so a Gemm reads and writes it without a Reshape pair
        around it (56 of a small model's 206 step-graph nodes were such Reshapes)."""
        self._views: dict[tuple[str, str], str] = {}

    def op(self, op_type: str, *inputs: str | None, outputs: int = 1, **attrs):
        """Append ``op_type`` reading ``inputs`` (None: an omitted optional input). Trailing
        omitted inputs are left out entirely rather than named "": OpenVINO and onnxruntime's
        quantiser reject a Gemm whose third input is the empty name."""
        self._count += 1
        base = f"{self.scope}/{op_type}_{self._count}" if self.scope else f"{op_type}_{self._count}"
        names = [base] if outputs == 1 else [f"{base}:{i}" for i in range(outputs)]
        inputs = list(inputs)
        while inputs and inputs[-1] is None:
            inputs.pop()
        self.nodes.append(helper.make_node(op_type, ["" if i is None else i for i in inputs], names, name=base,
                                           **{k: v for k, v in attrs.items() if v is not None}))
        if op_type in POINTWISE and any(i in self.flat for i in inputs):
            self.flat.add(names[0])
        return names[0] if outputs == 1 else names

    def const(self, value, dtype=None) -> str:
        """An initializer holding ``value`` (float values take the graph's float type)."""
        array = np.asarray(value, dtype=dtype or (self.np_dtype if np.asarray(value).dtype.kind == "f" else None))
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._consts:
            name = f"const_{len(self._consts)}"
            self.initializers[name] = numpy_helper.from_array(array, name)
            self._consts[key] = name
        return self._consts[key]

    def ints(self, *values: int) -> str:
        return self.const(np.array(values, dtype=np.int64))

    def param(self, name: str) -> str:
        """The IR parameter ``name`` as an initializer in the graph's float type (once)."""
        return self.stored(name, lambda: self.weights[name].astype(self.np_dtype, copy=False))

    def stored(self, name: str, make) -> str:
        """Initializer ``name`` holding ``make()``, made only if neither this graph nor (with a
        sink) an earlier graph writing the same data file holds it already."""
        if name not in self.initializers:
            if self.sink is not None:
                self.initializers[name] = self.sink.tensor(name, make)
            else:
                self.initializers[name] = numpy_helper.from_array(np.ascontiguousarray(make()), name)
        return name

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of IR parameter ``name``, without reading a lazily read one."""
        shapes = getattr(self.weights, "shapes", None)
        return tuple(shapes[name]) if shapes is not None else self.weights[name].shape

    def gather(self, table: str, ids: str) -> str:
        """Rows ``ids`` of the embedding ``table`` (quantised with ``quant``)."""
        if self.quant is not None and len(self.shape(table)) == 2:
            return self.quant.gather(self, table, ids)
        return self.op("Gather", self.param(table), ids)

    def input(self, name: str, shape, elem_type=None) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type or self.elem_type, shape))
        if self.batch is None and shape and shape[0] in ("batch", "batch_size"):  # tfspec's, optimum's name
            self.batch = self.op("Shape", name, start=0, end=1)
        return name

    def output(self, name: str, value: str, shape, elem_type=None) -> str:
        """Expose ``value`` as graph output ``name``: the producing node's output is renamed
        (no Identity node per output, which costs a kernel launch per decoding step)."""
        producer = next((n for n in reversed(self.nodes) if value in n.output), None)
        if producer is None or value in {o.name for o in self.outputs}:
            self.nodes.append(helper.make_node("Identity", [value], [name], name=f"output/{name}"))
        else:
            producer.output[list(producer.output).index(value)] = name
            for node in self.nodes:
                for i, source in enumerate(node.input):
                    if source == value:
                        node.input[i] = name
            for cache in (self._shapes, self._views):
                for key, cached in list(cache.items()):
                    if cached == value:
                        cache[key] = name
            if value in self.flat:
                self.flat.add(name)
            if self.batch == value:
                self.batch = name
        self.outputs.append(helper.make_tensor_value_info(name, elem_type or self.elem_type, shape))
        return name

    def model(self, metadata: dict[str, str]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, list(self.initializers.values()),
                                  value_info=self.shapes)
        tidy(graph)
        domains = sorted({n.domain for n in self.nodes if n.domain})  # onnxruntime's own ops (``inplace``)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)]
                                  + [helper.make_opsetid(d, 1) for d in domains],
                                  producer_name="tfspec", ir_version=10)
        helper.set_model_props(model, metadata)
        return model

    # Helpers used by several lowerings.
    def linear(self, x: str, weight: str, bias: str | None = None, table: bool = False) -> str:
        """x W^T + b with W in PyTorch's (out, in) layout, as a 2-D Gemm with transB: about
        1.5x faster decoding in onnxruntime's CPU kernels than MatMul on a transposed weight.
        A flat ``x`` gives a flat result; a (B, L, in) one is reshaped in and out. With
        ``quant``, MatMulNBits (``int4``), at the tables' bits for the output projection (``table``),
        or int8 (``gemm``)."""
        out, features = self.shape(weight)
        if self.quant is not None and not self.quant.every_product:
            y = self.quant.linear(self, self.rows(x, features), weight, bias, table)
        else:
            y = self.gemm(self.rows(x, features), weight, self.param(bias) if bias else None)
        self.flat.add(y)
        return y if x in self.flat else self.sequence(y, out)

    def gemm(self, x: str, weight: str, bias: str | None = None, make=None, transposed: bool = True) -> str:
        """x (rows, K) times a constant matrix plus the value ``bias``: one Gemm. The matrix is
        initializer ``weight``, holding ``make()`` (default: the IR parameter ``weight``), in
        PyTorch's (out, in) layout when ``transposed``, else (in, out). A ``quant`` that quantises
        ``every_product`` (``int8``) emits its own nodes, the weight quantised as it is read."""
        make = make or (lambda: self.weights[weight])
        if self.quant is not None and self.quant.every_product:
            return self.quant.gemm(self, x, weight, make, bias, transposed)
        matrix = self.stored(weight, lambda: make().astype(self.np_dtype, copy=False))
        return self.op("Gemm", x, matrix, bias, transB=1 if transposed else None)

    def rows(self, x: str, features: int) -> str:
        """The (B * L, features) view of ``x`` (``x`` itself when already flat)."""
        if x in self.flat:
            return x
        if (x, "rows") not in self._views:
            self._views[x, "rows"] = self.op("Reshape", x, self.ints(-1, features))
            self.flat.add(self._views[x, "rows"])
        return self._views[x, "rows"]

    def sequence(self, x: str, features: int) -> str:
        """The (B, L, features) view of a flat ``x`` (``x`` itself when it is not flat)."""
        if x not in self.flat:
            return x
        if (x, "sequence") not in self._views:
            self._views[x, "sequence"] = self.op("Reshape", x, self.batched(-1, features))
        return self._views[x, "sequence"]

    def batched(self, *dims: int) -> str:
        """The int64 shape (B, *dims), built once per ``dims``."""
        key = (self.batch, dims)  # a second tower has a batch of its own (``emit``)
        if key not in self._shapes:
            self._shapes[key] = self.op("Concat", self.batch, self.ints(*dims), axis=0)
        return self._shapes[key]

    def split(self, x: str, *sizes: int) -> list[str]:
        """``x`` cut along its last axis into ``sizes``; the parts keep its layout (flat or not)."""
        parts = self.op("Split", x, self.ints(*sizes), axis=-1, outputs=len(sizes))
        if x in self.flat:
            self.flat.update(parts)
        return parts

    def shape_of(self, x: str, axis: int) -> str:
        """Dimension ``axis`` of ``x`` as an int64 scalar."""
        return self.op("Squeeze", self.op("Shape", x, start=axis, end=axis + 1), self.ints(0))

    def neg(self) -> str:
        """The additive mask value: far below any score, finite so masked rows stay NaN-free."""
        return self.const(np.finfo(self.np_dtype).min / 2)


class Index:
    """An int64 tensor with Python operators emitting ONNX ops (for ``visible``)."""

    def __init__(self, b: Builder, name: str):
        self.b, self.name = b, name

    def _lift(self, other) -> str:
        return other.name if isinstance(other, Index) else self.b.const(np.int64(other))

    def _binary(self, op_type: str, other, swap: bool = False) -> Index:
        a, c = self.name, self._lift(other)
        return Index(self.b, self.b.op(op_type, *((c, a) if swap else (a, c))))

    def __add__(self, other): return self._binary("Add", other)
    def __radd__(self, other): return self._binary("Add", other, swap=True)
    def __sub__(self, other): return self._binary("Sub", other)
    def __rsub__(self, other): return self._binary("Sub", other, swap=True)
    def __mul__(self, other): return self._binary("Mul", other)
    def __rmul__(self, other): return self._binary("Mul", other, swap=True)
    def __mod__(self, other): return self._binary("Mod", other)  # fmod=0: the divisor's sign, as Python
    def __floordiv__(self, other):  # Div truncates towards zero; subtracting the remainder first floors
        return (self - self % other)._binary("Div", other)
    def __le__(self, other): return self._binary("LessOrEqual", other)
    def __lt__(self, other): return self._binary("Less", other)
    def __ge__(self, other): return self._binary("GreaterOrEqual", other)
    def __gt__(self, other): return self._binary("Greater", other)
    def __and__(self, other): return self._binary("And", other)
    def __or__(self, other): return self._binary("Or", other)
    def __invert__(self): return Index(self.b, self.b.op("Not", self.name))
    def __abs__(self): return Index(self.b, self.b.op("Abs", self.name))
