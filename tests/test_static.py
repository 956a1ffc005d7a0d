"""The static step graph (``export --static-cache``) decodes what the growing-cache step graph
and the PyTorch backend decode, with its state in buffers made once and never read by the host.

CUDA graphs themselves need a GPU (``tools/checks/gpu_check.py`` times them); here the decoder runs on
CPU with capture asked for, which onnxruntime's CPU provider ignores, so everything around the
capture (buffers, bucket changes, graph ids) runs as it would on CUDA.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from tfspec import load_spec
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.onnx.runtime.static import StaticDecoder, bucket
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.errors import TfspecError
from tfspec.search import SearchOptions, search

from tests.test_decoding import SPECS
from tests.test_onnx import VARIANTS, shrunk

ort = pytest.importorskip("onnxruntime")

KINDS = SPECS + ["zoo/t5-small", "zoo/transformer-additive", "zoo/mistral-7b"]
"""Every step-graph kind: relative positions and T5's bias (read off the cache slots), additive
scores, a sliding window (whose static cache keeps every slot and masks), convolutions and
recurrent layers (fixed-size states), decoder-only models with prompts."""


def exported(name, write_spec, path):
    spec = shrunk(name) if name not in VARIANTS else load_spec(write_spec(VARIANTS[name]))
    torch.manual_seed(0)
    model = build_module(spec).eval()
    export(model, path, parity=False, static_cache=True)
    return spec, model, OnnxModel(path, device="cpu")


def inputs(spec, batch: int, rng):
    if spec.family == "decoder-only":
        return None, rng.integers(4, spec.vocab.tgt_size, (batch, 3))
    src = rng.integers(4, spec.vocab.size, (batch, 7))
    src[-1, 4:] = spec.vocab.pad_id
    return src, None


@pytest.mark.parametrize("name", KINDS)
def test_static_decoding_equals_growing_cache_and_pytorch(name, write_spec, tmp_path):
    spec, model, onnx_model = exported(name, write_spec, tmp_path / "onnx")
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        src, prefix = inputs(spec, batch, rng)
        for beam in (1, 4):
            options = SearchOptions(beam=beam, max_extra=10, max_length=12)
            static = StaticDecoder(onnx_model, capture=True, first_length=4)  # the cache grows 4 -> 8 -> 16
            ours = search(static, src, options, prefix)
            assert ours == search(onnx_model.decoder(), src, options, prefix), (batch, beam)
            assert ours == search(TorchDecoder(model), src, options, prefix), (batch, beam)


CUDA_HOST_INPUTS = {"Reshape": {1}, "Unsqueeze": {1}, "Squeeze": {1}, "Slice": {1, 2, 3, 4}, "Expand": {1},
                    "ConstantOfShape": {0}, "Range": {0, 1, 2}, "TopK": {1}, "Tile": {1}, "Pad": {1, 2, 3},
                    "Split": {1}, "Trilu": {1}, "CumSum": {1}, "Clip": {1, 2}, "LSTM": {4}, "GRU": {4}}
"""Inputs that onnxruntime's CUDA kernels read from host memory (their kernel definitions'
``InputMemoryType(OrtMemTypeCPUInput, i)``); ``Shape`` writes its output to host memory."""


def host_copies(graph: onnx.GraphProto) -> list[str]:
    """The inputs onnxruntime would copy between host and GPU inside a CUDA step, which makes it
    refuse CUDA-graph capture. Placement as onnxruntime's ``GetCpuPreferredNodes`` does it: a
    node reading host tensors (or graph inputs, small constants) where its CUDA kernel wants
    device memory runs on the CPU provider, and so do the nodes that read only its outputs."""
    small = {i.name for i in graph.initializer if np.prod(i.dims) <= 100}
    small |= {n.output[0] for n in graph.node if n.op_type == "Constant"}
    inputs = {i.name for i in graph.input}
    on_host = {o for n in graph.node if n.op_type == "Shape" for o in n.output}
    host_nodes = set()
    for i, node in enumerate(graph.node):  # topological order: producers come first
        wanted = CUDA_HOST_INPUTS.get(node.op_type, set())
        reads = [(j, name) for j, name in enumerate(node.input) if name and name not in small | inputs]
        if node.op_type not in ("Shape", "Constant") and reads and all(
                name in on_host and j not in wanted for j, name in reads):
            host_nodes.add(i)
            on_host.update(node.output)
    copies = []
    for i, node in enumerate(graph.node):
        for j, name in enumerate(node.input):
            if name and name not in small and node.op_type != "Constant":
                there = name in on_host or name == "top_k"  # top_k: bound in host memory, read there by TopK
                if there != (i in host_nodes or j in CUDA_HOST_INPUTS.get(node.op_type, set())):
                    copies.append(f"{node.op_type} {node.name}: input {j} ({name})")
    return copies


@pytest.mark.parametrize("name", KINDS)
def test_no_step_node_would_copy_between_host_and_gpu(name, write_spec, tmp_path):
    """onnxruntime refuses to capture a CUDA graph over a step holding a Memcpy node. Shapes
    may be read on the host (the shape arithmetic then runs there, as onnxruntime places it),
    but nothing the step computes may pass through host memory."""
    exported(name, write_spec, tmp_path / "onnx")
    assert host_copies(onnx.load(tmp_path / "onnx" / "decoder_static.onnx").graph) == []


def test_a_step_computing_from_a_shape_is_seen_to_copy():
    """The check's negative control: positions from the cache's length (Shape) added to a
    device tensor put the Add on the host, and the device tensor must be copied there."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Shape", ["past"], ["shape"], start=2, end=3),
         onnx.helper.make_node("Add", ["shape", "offset"], ["position"]),
         onnx.helper.make_node("Gather", ["table", "position"], ["row"])],
        "step", [onnx.helper.make_tensor_value_info("past", onnx.TensorProto.FLOAT, [1, 2, None, 4]),
                 onnx.helper.make_tensor_value_info("offset", onnx.TensorProto.INT64, [1])],
        [onnx.helper.make_tensor_value_info("row", onnx.TensorProto.FLOAT, [1, 512])],
        [onnx.numpy_helper.from_array(np.zeros((64, 512), np.float32), "table")])
    assert host_copies(graph) == ["Add : input 1 (offset)", "Gather : input 1 (position)"]


def test_source_padding_stops_at_the_position_table(write_spec, tmp_path):
    """Sources are padded up to a power of two, but never past the rows of the encoder's
    position table (17 tokens with 20 positions: padded to 20, not 32)."""
    path = write_spec("name: short\nextends: tiny\npositional: {kind: sinusoidal, max_len: 20}\n")
    spec = load_spec(path)
    torch.manual_seed(0)
    model = build_module(spec).eval()
    export(model, tmp_path / "onnx", parity=False, static_cache=True)
    onnx_model = OnnxModel(tmp_path / "onnx", device="cpu")
    src = np.random.default_rng(0).integers(4, spec.vocab.size, (2, 17))
    options = SearchOptions(beam=2, max_length=3)
    assert search(onnx_model.decoder(static=True), src, options) == search(TorchDecoder(model), src, options)


def test_state_stays_in_the_buffers_made_for_it(write_spec, tmp_path, monkeypatch):
    """Only control inputs are written from the host and only the top-k read back; each step
    reads the buffers the previous one wrote (ping-pong), and a shape met again reuses its
    binding, so its buffers keep their addresses (what a replayed CUDA graph reads)."""
    spec, _, onnx_model = exported("tiny", write_spec, tmp_path / "onnx")
    decoder = StaticDecoder(onnx_model, capture=True)
    written, read = [], []
    value = type(onnx_model.on_device(np.zeros(1)))
    write, copy = value.update_inplace, value.numpy
    monkeypatch.setattr(value, "update_inplace", lambda self, array: (written.append(self), write(self, array))[1])
    monkeypatch.setattr(value, "numpy", lambda self: (read.append(self), copy(self))[1])
    steps, run = [], decoder.step
    monkeypatch.setattr(decoder, "step", lambda state, *a: steps.append(state.pasts) or run(state, *a))
    src, _ = inputs(spec, 3, np.random.default_rng(0))
    search(decoder, src, SearchOptions(beam=4, max_extra=8, max_length=10))
    search(decoder, src, SearchOptions(beam=4, max_extra=8, max_length=10))
    kinds = {id(v): key[0] for key, v in decoder.buffers.items()}
    assert {kinds[id(v)] for v in written} == {"in"} and {kinds[id(v)] for v in read} == {"out"}
    for before, after in zip(steps, steps[1:]):
        if before is not None and after is not None:  # parity flips: each step reads one buffer, writes the other
            assert after[2] != before[2]
    ids = [options.get_run_config_entry("gpu_graph_id") for _, options, _ in decoder.bindings.values()]
    captured = [i for i in ids if i != "-1"]
    assert len(decoder.bindings) < len(steps) / 2 and len(set(captured)) == len(captured) > 0


def test_buckets_and_refusals(tmp_path, cli):
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 64, 65)] == [1, 2, 4, 4, 8, 64, 128] and bucket(3, 16) == 16
    code, out, _ = cli("export", "tiny", "-o", tmp_path / "plain")
    assert code == 0 and "static" not in out
    with pytest.raises(TfspecError, match="--static-cache"):
        OnnxModel(tmp_path / "plain", device="cpu").decoder(static=True)
    code, out, _ = cli("export", "tiny", "-o", tmp_path / "static", "--static-cache")
    assert code == 0 and "decoder_static.onnx" in out
    assert "ok   static step graph, greedy and beam 4" in out
    code, _, err = cli("export", "zoo/gpt2", "-o", tmp_path / "genai", "--format", "genai", "--static-cache")
    assert code == 2 and err.startswith("error: --static-cache applies to --format onnx")


def test_a_failed_capture_is_one_error_naming_the_way_out(write_spec, tmp_path, monkeypatch, cli):
    """A kernel that cannot be captured fails its run, not the session's creation: that is an
    error line pointing at `--no-cuda-graphs`, not a traceback (the flag itself is checked on CPU)."""
    spec, _, onnx_model = exported("tiny", write_spec, tmp_path / "onnx")
    decoder = StaticDecoder(onnx_model, capture=True)

    class Refusing:
        def __getattr__(self, name):
            return getattr(onnx_model.static_session(), name)

        def run_with_iobinding(self, *args):
            raise RuntimeError("CUDA failure 900: operation not permitted when stream is capturing\nmore")

    decoder.session = Refusing()
    src, _ = inputs(spec, 2, np.random.default_rng(0))
    with pytest.raises(TfspecError, match=r"stream is capturing\); decode without them \(`tfspec translate "
                                          r"--no-cuda-graphs`"):
        search(decoder, src, SearchOptions(beam=2, max_length=4))
    (tmp_path / "in.txt").write_text("5 6 7\n")
    code, out, _ = cli("translate", tmp_path / "onnx", tmp_path / "in.txt", "--no-cuda-graphs", "--device", "cpu")
    options = SearchOptions(beam=4, max_length=spec.positional.max_len - 1)  # translate's defaults
    expected = search(onnx_model.decoder(static=False), np.array([[5, 6, 7, spec.vocab.eos_id]]), options)[0]
    assert code == 0 and out.split("\n")[0] == " ".join(map(str, expected))
