"""``export --fused``: onnxruntime's fused CPU operators in place of the standard-op patterns
the graphs spell out, for fewer nodes per decoding step (each node costs the runtime a fixed
~1 us of dispatch and allocation, which at d_model 256 weighs against the arithmetic).

Passes over an emitted graph, each rewriting one pattern and counting what it rewrote:

``attention``   ``softmax(Q K^T x scale + mask) V`` with its head transposes, on (B, h, L, d)
                queries and keys/values -> one ``com.microsoft.MultiHeadAttention`` (queries
                (B, L, h*d), keys/values in (B, h, T, d) as the cache holds them, the mask as
                ``attention_bias`` expanded to (B or 1, 1, L, T)): 9 nodes -> 5.
``skip_norm``   a residual ``Add`` read by an RMSNorm (spelled out below opset 23) -> one
                ``com.microsoft.SkipSimplifiedLayerNormalization`` (output 3 is the sum the
                residual stream carries on): 0.84 us against 3.1 us for one 768-wide row,
                20.5 against 37.3 us for 64 (onnxruntime 1.32, 2 threads). A LayerNorm keeps
                its ``Add`` and ``LayerNormalization``: onnxruntime's SkipLayerNormalization
                kernel took 1.6-3.3x as long as the two at every width (256-1024) and row
                count (1-64) measured, which made `small`'s fused step graph 0.95-0.98x.

onnxruntime's own optimiser (``ORT_ENABLE_ALL``) and ``onnxruntime.transformers.optimizer``
fuse neither in these graphs (measured on ``small``'s step graph: 174 nodes -> 162 and 165),
their attention patterns being those of the exporters of transformers. The rewritten graphs
run on onnxruntime only (OpenVINO and browsers lack the com.microsoft domain): the portable
graphs stay the default.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .tidy import tidy

DOMAIN = "com.microsoft"
SMALL = 64
"""Initializers of at most this many values are read as arrays (scales, axes, epsilons); the
weights are known by name and shape only, so that rewriting copies none of them."""


class Rewriter:
    """A graph's nodes with who produces and who reads each tensor, and its inferred shapes."""

    def __init__(self, model: onnx.ModelProto):
        self.model, self.graph = model, model.graph
        inferred = onnx.shape_inference.infer_shapes(_without_weights(model), data_prop=True).graph
        self.shapes = {v.name: [d.dim_value or d.dim_param or None for d in v.type.tensor_type.shape.dim]
                       for v in (*inferred.value_info, *inferred.input, *inferred.output)
                       if v.type.tensor_type.HasField("shape")}
        self.initialized = {t.name for t in self.graph.initializer}
        self.constants = {t.name: numpy_helper.to_array(t) for t in self.graph.initializer if _small(t)}
        self.outputs = {o.name for o in self.graph.output}
        self._count = 0
        self.index()

    def index(self) -> None:
        self.producer = {o: n for n in self.graph.node for o in n.output}
        self.readers: dict[str, list] = {}
        for n in self.graph.node:
            for i in n.input:
                self.readers.setdefault(i, []).append(n)

    def made_by(self, name: str, op: str, **attrs):
        """The node of type ``op`` (with these attribute values) producing ``name``, or None."""
        node = self.producer.get(name)
        if node is None or node.op_type != op:
            return None
        found = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return node if all(found.get(k) == v for k, v in attrs.items()) else None

    def private(self, name: str) -> bool:
        """Whether ``name`` is read by one node and is no graph output (rewriting may drop it)."""
        return len(self.readers.get(name, [])) == 1 and name not in self.outputs

    def name(self, op: str) -> str:
        self._count += 1
        return f"fused/{op}_{self._count}"

    def constant(self, value: np.ndarray) -> str:
        name = self.name("const")
        self.graph.initializer.append(numpy_helper.from_array(value, name))
        return name

    def replace(self, old: list, new: list, first: bool = False) -> None:
        """Drop ``old`` and put ``new`` where the last of it was (after every input the pattern
        read, before every reader of what it wrote), or with ``first`` where the first was
        (when ``new`` reads only what the first read)."""
        drop = {tuple(n.output) for n in old}  # outputs name a node: protobuf lists hold copies
        nodes = list(self.graph.node)
        at = (min if first else max)(i for i, n in enumerate(nodes) if tuple(n.output) in drop)
        kept = lambda part: [n for n in part if tuple(n.output) not in drop]  # noqa: E731
        nodes = kept(nodes[:at]) + new + kept(nodes[at:])
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        self.index()

    def each(self, op: str) -> list:
        """The ``op`` nodes now, by their first output (later rewrites replace the objects)."""
        return [n.output[0] for n in self.graph.node if n.op_type == op]


def _without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its large initializers as graph inputs of their type and shape, all that
    shape inference reads of them: it copies the model it is given (a 103M-parameter model's
    ``export --fused`` peaked 0.7 GB higher with the weights in that copy, and 20% slower)."""
    g = model.graph
    large = [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in g.initializer if not _small(t)]
    small = [t for t in g.initializer if _small(t)]
    graph = helper.make_graph(g.node, g.name, [*g.input, *large], g.output, small, value_info=g.value_info)
    return helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)


def _small(t: onnx.TensorProto) -> bool:
    """Whether initializer ``t`` is read as an array: small, and in the proto (a streamed
    export's weights are references into its data file, known by name and shape only)."""
    return np.prod(t.dims) <= SMALL and t.data_location != onnx.TensorProto.EXTERNAL


def fuse(model: onnx.ModelProto, one_length: bool = False) -> Counter:
    """Rewrite ``model`` in place with onnxruntime's fused operators; how many of each it made.
    ``one_length``: every attention in the graph has queries of one length (one token stream:
    the encoder, the step graphs), so a mask expanded for one serves all that read it."""
    r = Rewriter(model)
    made = Counter({"MultiHeadAttention": attention(r, one_length)}) + skip_norm(r)
    if sum(made.values()) and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    tidy(model.graph)  # what the rewrites left unread (the attention scales folded into attributes) or repeated
    return +made


def attention(r: Rewriter, one_length: bool = False) -> int:
    """``softmax(Q K^T x scale + mask) V`` (``attention.attend`` at opsets below 23) -> one
    MultiHeadAttention node; a pattern with anything else in it (a relative-position term,
    soft-capping, keys read by another node) is left as it is. With ``one_length`` each mask
    is expanded once, by the first attention that reads it, for all (3 nodes a layer fewer)."""
    count, biases = 0, {}
    for name in r.each("Softmax"):
        found = _attention_pattern(r, r.producer[name])
        if found is None:
            continue
        old, rows, k, v, mask, scale, heads, width = found
        query = r.name("query")
        new = [helper.make_node("Reshape", [rows, r.constant(np.array([0, 0, width], np.int64))], [query])]
        if mask is not None and mask in biases:
            mask = biases[mask]
        elif mask is not None:  # attention_bias must be 4-D with the queries' length on axis 2
            length, shape, bias = r.name("length"), r.name("bias_shape"), r.name("bias")
            new += [helper.make_node("Shape", [query], [length], start=1, end=2),
                    helper.make_node("Concat", [r.constant(np.ones(2, np.int64)), length,
                                                r.constant(np.ones(1, np.int64))], [shape], axis=0),
                    helper.make_node("Expand", [mask, shape], [bias])]
            if one_length:
                biases[mask] = bias
            mask = bias
        y = r.name("attention")
        new += [helper.make_node("MultiHeadAttention", [query, k, v, "", "", mask or ""], [y], domain=DOMAIN,
                                 num_heads=heads, scale=scale),
                helper.make_node("Reshape", [y, r.constant(np.array([-1, width], np.int64))], [old[0].output[0]])]
        r.replace(old, new)
        count += 1
    return count


def _attention_pattern(r: Rewriter, soft):
    """The nodes of the attention around ``soft`` and what MultiHeadAttention reads, or None:
    (nodes, queries (B, L, h, d), keys, values, mask, scale, heads, h * d)."""
    out = r.readers.get(soft.output[0], [])
    pv = out[0] if len(out) == 1 and out[0].op_type == "MatMul" and out[0].input[0] == soft.output[0] else None
    after = pv and r.private(pv.output[0]) and r.readers[pv.output[0]][0]
    if not after or after.op_type != "Transpose" or not r.made_by(after.output[0], "Transpose", perm=[0, 2, 1, 3]):
        return None
    flat = r.readers.get(after.output[0], [None])[0]
    if flat is None or flat.op_type != "Reshape" or not r.private(after.output[0]):
        return None
    scores, mask, nodes = soft.input[0], None, [flat, soft, pv, after]  # the output's node first
    add = r.made_by(scores, "Add")
    if add is not None and r.private(scores):
        scores, mask = add.input
        nodes.append(add)
    qk = r.made_by(scores, "MatMul")
    kt = qk and r.made_by(qk.input[1], "Transpose", perm=[0, 1, 3, 2])
    if not qk or not kt or not r.private(scores) or not r.private(kt.output[0]):
        return None
    q, scale = qk.input[0], None
    mul = r.made_by(q, "Mul")
    if mul is not None and r.private(q) and np.size(r.constants.get(mul.input[1], [])) == 1:
        q, scale = mul.input[0], float(r.constants[mul.input[1]].reshape(()))
        nodes.append(mul)
    heads_first = r.made_by(q, "Transpose", perm=[0, 2, 1, 3])
    shape = r.shapes.get(q)
    if not heads_first or not shape or len(shape) != 4 or not all(isinstance(d, int) for d in shape[1::2]) \
            or len(r.shapes.get(mask, [0] * 4) if mask else []) > 4:
        return None
    heads, size = shape[1], shape[3]
    nodes += [qk, kt] + ([heads_first] if r.private(q) else [])  # a causal mask reads the queries' shape
    return nodes, heads_first.input[0], kt.input[0], pv.input[1], mask, scale or 1.0, heads, heads * size


def skip_norm(r: Rewriter) -> Counter:
    """A residual ``Add`` of two tensors of one shape read by an RMSNorm (spelled out at opsets
    below 23: Llama, T5) -> one SkipSimplifiedLayerNormalization, whose fourth output is the
    sum the other readers take (the module docstring says why not LayerNorms)."""
    made = Counter()
    for name in r.each("ReduceMean"):
        found = _rms_norm(r, r.producer[name])
        if found is None:
            continue
        old, x, params, eps, y = found
        add = r.made_by(x, "Add")
        if add is None or not _residual(r, add):
            continue
        total = [] if all(n in old for n in r.readers[x]) and x not in r.outputs else ["", "", x]
        r.replace([add, *old], [helper.make_node("SkipSimplifiedLayerNormalization", [*add.input, *params], [y, *total],
                                                 domain=DOMAIN, epsilon=eps)], first=True)
        made["SkipSimplifiedLayerNormalization"] += 1
    return made


def _residual(r: Rewriter, add) -> bool:
    """Whether ``add`` sums two computed tensors of one shape (no broadcasting, which the fused
    norms do not all do)."""
    a, b = (r.shapes.get(i) for i in add.input)
    return (bool(a) and bool(b) and len(a) == len(b) and len(a) in (2, 3) and isinstance(a[-1], int)
            and a[-1] == b[-1] and not any(i in r.initialized for i in add.input)
            and not any(x != y and (isinstance(x, int) or isinstance(y, int)) for x, y in zip(a, b)))


def _rms_norm(r: Rewriter, mean):
    """(nodes, input, [gain], epsilon, output) of ``lowerings.normalize``'s float32 RMSNorm:
    x / Sqrt(ReduceMean(x * x, -1) + eps) * gain."""
    square = r.made_by(mean.input[0], "Mul")
    x = square.input[0] if square and square.input[0] == square.input[1] else None
    axes = r.constants.get(mean.input[1]) if len(mean.input) > 1 else None
    plus = r.readers.get(mean.output[0], [None])[0]
    if x is None or axes is None or axes.tolist() != [-1] or not plus or plus.op_type != "Add":
        return None
    root = r.readers.get(plus.output[0], [None])[0]
    div = root and root.op_type == "Sqrt" and r.readers.get(root.output[0], [None])[0]
    gain = div and div.op_type == "Div" and div.input == [x, root.output[0]] and r.readers.get(div.output[0])
    eps = r.constants.get(plus.input[1])
    if not gain or len(gain) != 1 or gain[0].op_type != "Mul" or gain[0].input[1] not in r.initialized or eps is None \
            or any(not r.private(n.output[0]) for n in (square, mean, plus, root, div)):
        return None
    return [square, mean, plus, root, div, gain[0]], x, [gain[0].input[1]], float(eps), gain[0].output[0]
