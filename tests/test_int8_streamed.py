"""`tfspec export --int8` streams (``backends/onnx/streamed.py``): each weight read from the
checkpoint, quantised, appended to the data file and freed, then checked as int4 is
(``backends/parity/quant.py``). What it writes is what the in-memory int8 route writes
(itself tested bit for bit against onnxruntime's quantize_dynamic: tests/test_int8_quantiser.py);
its logits stay near transformers' float32 ones; the check fails when the graphs multiply by
other weights than the scales say; and the quantiser holds a bounded number of tensors."""

from __future__ import annotations

import json
import math
import tracemalloc

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.onnx.exporter import graph_kinds
from tfspec.backends.onnx.passes.int8 import Int8
from tfspec.backends.parity.quant import dequantised
from tfspec.backends.onnx.streamed import export_streamed, needs, written_bytes
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import save_weights
from tfspec.ir import build_graph
from tfspec.spec import load_spec, spec_from_data

from test_int4 import imported
from test_int8_quantiser import ENCODER, MOE, SPECS
from test_shortlist import corpus  # noqa: F401 (a fixture)

pytest.importorskip("onnxruntime")


def graph_of(directory, file) -> tuple[list, dict[str, np.ndarray]]:
    """(the nodes, initializer name -> value) of one graph, its external data read."""
    proto = onnx.load(str(directory / file))
    return list(proto.graph.node), {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


@pytest.mark.parametrize("name,fused", [("tiny", False), ("tiny", True), ("moe", False), ("encoder-head", False)],
                         ids=["tiny", "tiny-fused", "moe", "encoder-head"])
def test_streamed_int8_writes_the_in_memory_int8_graphs(name, fused, tmp_path):
    """The same nodes and the same initializers, bit for bit, in every graph (the in-place step
    graph of --fused too), from one safetensors file read one tensor at a time."""
    spec = SPECS[name]()
    torch.manual_seed(0)
    model = build_module(spec).eval()
    save_weights(model, tmp_path / "w.safetensors")
    export(model, tmp_path / "memory", parity=False, int8=True, fused=fused)
    graph = build_graph(spec)
    _, reader = export_streamed(graph, tmp_path / "w.safetensors", tmp_path / "streamed", graph_kinds(graph, fused=fused),
                                quant=Int8(), progress=False, fused=fused)
    assert reader.peak == 1
    graphs = json.loads((tmp_path / "memory" / "tfspec.json").read_text())["graphs"]
    streamed = json.loads((tmp_path / "streamed" / "tfspec.json").read_text())
    assert streamed["graphs"] == graphs and streamed["int8"]["weights"] == Int8().describe()
    assert ("decoder_inplace" in graphs) == (fused and spec.family != "encoder-only")
    for file in graphs.values():
        (nodes, values), (their_nodes, theirs) = graph_of(tmp_path / "streamed", file), graph_of(tmp_path / "memory", file)
        assert nodes == their_nodes, file
        assert values.keys() == theirs.keys() and any(n.endswith(".int8") for n in values), file
        for key, value in theirs.items():
            assert value.dtype == values[key].dtype and np.array_equal(values[key], value), f"{file}: {key}"


@pytest.mark.parametrize("case", ["llama", "qwen2-tied"])
def test_cli_int8_streams_and_checks_against_the_dequantised_and_the_float_model(case, cli, tmp_path):
    """An imported bf16 checkpoint: streamed one tensor at a time, every product int8, the
    quant_parity checks passing, and the logits near transformers' own float32 ones."""
    model, ours = imported(case, tmp_path, cli, torch.bfloat16)
    code, out, err = cli("export", ours, "-o", tmp_path / "q8", "--int8")
    assert code == 0 and "parity: ok" in out and "streaming" in err, out + err
    assert "at most 1 in memory at once" in out and "int8 weights, in PyTorch" in out
    assert "full-sequence logits vs float32, RMS relative to theirs" in out
    ops = [n.op_type for n in onnx.load(str(tmp_path / "q8" / "decoder.onnx"), load_external_data=False).graph.node]
    assert ops.count("MatMulInteger") == 2 * 5 + 1 and "Gemm" not in ops  # qkv, o, w1, w3, w2 per layer; output
    tokens = torch.randint(6, 120, (2, 20))
    with torch.no_grad():
        want = model(tokens).logits.numpy()
    got = OnnxModel(tmp_path / "q8", device="cpu").logits(tgt=tokens.numpy())
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < Int8.float_rms
    manifest = json.loads((tmp_path / "q8" / "tfspec.json").read_text())
    assert manifest["int8"]["ops"] == ["MatMul", "Gemm"] and manifest["weights"]["file"] == "model.onnx.data"


@pytest.mark.parametrize("data,seed", [(ENCODER, 1), (MOE, 0)], ids=["encoder-head", "moe"])
def test_cli_int8_of_task_heads_and_routed_experts(data, seed, cli, tmp_path):
    """The pooled output and the encoder memory are compared within their own magnitudes, not the
    classifier's logits' (a tenth of theirs: seed 1's memory differs by 2.9e-2, the logits'
    tolerance is 1.5e-2); each expert's slice of its parameter holds that expert's int8 weights."""
    (tmp_path / "s.yaml").write_text(json.dumps(data), encoding="utf-8")
    torch.manual_seed(seed)
    save_weights(build_module(spec_from_data(data, "test")).eval(), tmp_path / "w.safetensors")
    code, out, err = cli("export", tmp_path / "s.yaml", "--weights", tmp_path / "w.safetensors", "-o", tmp_path / "q8",
                         "--int8")
    assert code == 0 and "parity: ok" in out, out + err
    assert data is MOE or ("ok   pooled output" in out and "ok   encoder memory" in out)


def test_cli_int8_with_a_shortlist_stays_in_memory(cli, corpus, tmp_path):  # noqa: F811
    """--shortlist's step graph is checked against the float32 one before --int8 quantises both:
    the in-memory route, which says so; asked to stream, one error line."""
    data, tokenizer = corpus
    flags = ["export", "tiny", "--tokenizer", tokenizer, "--shortlist", data, "--int8"]
    code, out, err = cli(*flags, "-o", tmp_path / "m")
    assert code == 0 and "; float32 route" in err and "ok   shortlist step graph vs step graph" in out, out + err
    assert "greedy tokens equal to float32" in out and "shortlist.safetensors" in out
    code, _, err = cli(*flags, "--stream", "-o", tmp_path / "s")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and errors == ["error: --shortlist is exported in memory only (its step graph is checked "
                                    "against the float32 one, which --int8 then quantises): leave out --stream"]


def test_a_tied_table_is_gathered_in_float32_and_multiplied_in_int8(cli, tmp_path):
    """The PyTorch model of the check holds what the graph holds: the float32 table its Gather
    reads, and for the output projection the int8 values times their scales (recomputed here in
    numpy from the graph's initializers), as two parameters."""
    _, ours = imported("qwen2-tied", tmp_path, cli)
    code, _, err = cli("export", ours, "-o", tmp_path / "q8", "--int8", "--no-check")
    assert code == 0, err
    spec = load_spec(ours)
    model = build_module(spec).eval()
    table = next(n for n in build_graph(spec).nodes() if n.op == "embedding").params["weight"]
    _, values = graph_of(tmp_path / "q8", "model.onnx")
    with torch.no_grad():
        model.get_parameter(table).copy_(torch.from_numpy(values[table].copy()))
    dequantised(model, tmp_path / "q8" / "model.onnx", Int8())
    output = next(n for n in model.graph.nodes() if n.op == "projection")
    gathered, multiplied = model.get_parameter(table), model.get_submodule(output.name).weight
    np.testing.assert_array_equal(gathered.detach().numpy(), values[table])
    want = (values[f"{table}.T.int8"].astype(np.float32) * values[f"{table}.T.int8.scales"]).T
    np.testing.assert_array_equal(multiplied.detach().numpy(), want)
    assert not np.array_equal(want, values[table])


def test_the_check_fails_on_graphs_that_multiply_by_other_scales(cli, tmp_path, monkeypatch):
    """Every product's scales written for the wrong channels (reversed): the dequantised model
    holds those weights too, so the comparison with float32 is what fails, and the export says so
    (exit 1)."""
    from tfspec.backends.onnx.passes import int8

    _, ours = imported("llama", tmp_path, cli)
    real = int8.quantize
    monkeypatch.setattr(int8, "quantize", lambda w, transposed=True: (lambda q, s: (q, s[::-1].copy()))(
        *real(w, transposed)))
    code, out, err = cli("export", ours, "-o", tmp_path / "m", "--int8")
    assert code == 1 and "parity: FAILED" in out, out + err
    assert "FAIL full-sequence logits vs float32" in out


def test_the_check_fails_where_pytorch_holds_other_weights_than_the_graphs(cli, tmp_path, monkeypatch):
    """The check's PyTorch model given q without its scales: the comparison with the weights the
    graphs hold fails (it is that tight: a wrong scale or wiring errs by the logits' size)."""
    torch.manual_seed(0)
    save_weights(build_module(load_spec("tiny")).eval(), tmp_path / "w.safetensors")
    monkeypatch.setattr(Int8, "dequantize", lambda self, name, read, shape: _without_scales(name, read))
    code, out, err = cli("export", "tiny", "--weights", tmp_path / "w.safetensors", "-o", tmp_path / "m", "--int8")
    assert code == 1 and "FAIL full-sequence logits, batch 3 (the graphs' int8 weights, in PyTorch)" in out, out + err


def _without_scales(name, read):
    w = read(name).astype(np.float32)
    return w.T if name.endswith(".T.int8") else w


DEEP = {"name": "deep", "family": "decoder-only", "vocab": 4096, "d_model": 256, "heads": 4, "d_ff": 512,
        "dropout": 0.0, "norm": "pre", "norm_type": "rms", "gated": True, "activation": "silu", "bias": False,
        "positional": {"kind": "rotary", "max_len": 64}, "decoder": {"layers": 12, "block": ["causal_self_attention", "ffn"]}}
"""Many layers of small tensors: the whole model is ~8.5 times its largest (the tied embedding table)."""


def test_streamed_int8_holds_a_bounded_number_of_tensors(tmp_path):
    """Python's allocations while streaming (tracemalloc: numpy's buffers included) stay within
    2.5 times the largest tensor in float32 (measured 1.8: the tied table read for its product,
    its int8 copy and one row chunk), far below the float32 model, which is never held."""
    spec = spec_from_data(DEEP, "test")
    graph = build_graph(spec)
    torch.manual_seed(0)
    save_weights(build_module(spec), tmp_path / "w.safetensors")
    largest, total = 4 * max(math.prod(p.shape) for p in graph.params.values()), 4 * graph.num_params
    tracemalloc.start()
    try:
        _, reader = export_streamed(graph, tmp_path / "w.safetensors", tmp_path / "q8", ["model", "decoder"],
                                    quant=Int8(), progress=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reader.peak == 1 and total > 8 * largest
    assert peak < 2.5 * largest, f"peak {peak / 2**20:.1f} MiB; largest tensor {largest / 2**20:.1f} MiB"


def test_a_7b_int8_export_is_stated_to_fit_in_24_gib():
    """Llama-2-7B's shape: the streamed int8 route's statement (its largest tensor's temporaries
    and onnxruntime's copy of the int8 weights) fits a 24 GiB machine; the float32 route does not."""
    graph = build_graph(load_spec("zoo/llama-2-7b"))
    need = needs(graph, written_bytes(graph, Int8()))
    assert need.streamed < 16 << 30 < 24 << 30 < need.floating
    assert written_bytes(graph, Int8()) < 0.3 * written_bytes(graph, None)  # int8 products, one float32 table
