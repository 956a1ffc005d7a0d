"""The ONNX decoder keeps its state on the device and still decodes like the PyTorch backend.

A spy on onnxruntime's Python API (and on the step's run through its C-level binding) watches
every run: past keys/values and cross-attention
values must be bound as OrtValues (never fed or bound as numpy arrays), each step's pasts
must be the very buffers the previous step returned as presents, cross-attention values must
come from a run on the device (the encoder, once per search, or a gather of its rows) and stay
the same from step to step unless such a run came between, and no state may be copied to the
host.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfspec import load_spec
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.onnx.runtime import decoding
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.search import SearchOptions, search

from tests.test_onnx import VARIANTS, shrunk

ort = pytest.importorskip("onnxruntime")
collection = pytest.importorskip("onnxruntime.capi.onnxruntime_inference_collection")

STATE = ("past.", "cross.", "memory_bias")


class Spy:
    """Records what crosses between the host and onnxruntime, run by run."""

    def __init__(self, monkeypatch):
        self.runs: list[tuple[bool, dict, dict]] = []  # (a step?, input name -> data_ptr, output name -> data_ptr)
        self.live: set[int] = set()  # buffers of the state now held: pasts and presents of the last step
        self._inputs: dict[int, dict] = {}  # per binding
        self._outputs: dict[int, list[str]] = {}
        self._wrap(monkeypatch)

    def _wrap(self, mp):
        io, session, value = ort.IOBinding, collection.Session, collection.OrtValue
        spy = self

        def refuse(original):
            def bind(binding, name, *args, **kwargs):
                assert not name.startswith(STATE), f"{name} bound from host memory"
                spy._inputs.setdefault(id(binding), {})[name] = None
                return original(binding, name, *args, **kwargs)
            return bind

        def bind_ortvalue_input(binding, name, ortvalue):
            spy._inputs.setdefault(id(binding), {})[name] = ortvalue.data_ptr()
            return original_bind_ortvalue(binding, name, ortvalue)

        def bind_output(binding, name, *args, **kwargs):
            names = spy._outputs.setdefault(id(binding), [])
            if name not in names:  # onnxruntime rebinds a name in place
                names.append(name)
            return original_bind_output(binding, name, *args, **kwargs)

        def clear_binding_outputs(binding):
            spy._outputs[id(binding)] = []
            return original_clear(binding)

        def run_with_iobinding(sess, binding, *args, **kwargs):
            result = original_run_binding(sess, binding, *args, **kwargs)
            outputs = dict(zip(spy._outputs[id(binding)], (v.data_ptr() for v in binding.get_outputs())))
            inputs = dict(spy._inputs[id(binding)])
            spy.runs.append(("tgt" in inputs, inputs, outputs))
            if "tgt" in inputs:
                spy.live = {p for n, p in [*outputs.items(), *inputs.items()] if n.startswith(("present.", *STATE)) and p}
            return result

        def raw_run(raw, values, host, device):  # a step, bound through the C-level binding
            assert not any(n.startswith(("present.", *STATE)) for n in host), "decoding state copied to the host"
            arrays, presents = original_raw_run(raw, values, host, device)
            inputs = {n: v.data_ptr() for n, v in values.items()} | {"tgt": None}
            outputs = dict(zip(device, (v.data_ptr() for v in presents)))
            spy.runs.append((True, inputs, outputs))
            spy.live = {p for n, p in [*outputs.items(), *inputs.items()] if n.startswith(("present.", *STATE)) and p}
            return arrays, presents

        def run(sess, output_names, feeds, *args, **kwargs):
            assert not any(n.startswith(STATE) for n in feeds), "decoding state fed as numpy arrays"
            return original_run(sess, output_names, feeds, *args, **kwargs)

        def numpy(ortvalue):
            assert ortvalue.data_ptr() not in spy.live, "decoding state copied to the host"
            return original_numpy(ortvalue)

        original_bind_ortvalue, original_bind_output = io.bind_ortvalue_input, io.bind_output
        original_clear, original_run_binding = io.clear_binding_outputs, session.run_with_iobinding
        original_run, original_numpy = session.run, value.numpy
        original_raw_run = decoding._RawBinding.run
        mp.setattr(decoding._RawBinding, "run", raw_run)
        mp.setattr(io, "bind_cpu_input", refuse(io.bind_cpu_input))
        mp.setattr(io, "bind_input", refuse(io.bind_input))
        mp.setattr(io, "bind_ortvalue_input", bind_ortvalue_input)
        mp.setattr(io, "bind_output", bind_output)
        mp.setattr(io, "clear_binding_outputs", clear_binding_outputs)
        mp.setattr(io, "copy_outputs_to_cpu", lambda binding: pytest.fail("outputs copied to the host"))
        mp.setattr(session, "run_with_iobinding", run_with_iobinding)
        mp.setattr(session, "run", run)
        mp.setattr(value, "numpy", numpy)

    def check_search(self) -> None:
        """Each step after the first binds the previous step's presents as its pasts; cross
        values come from device runs (the encoder once, or gathers) that never touch pasts."""
        assert sum("src" in inputs for _, inputs, _ in self.runs) <= 1
        made, previous = set(), None  # buffers produced by runs other than steps; the last step
        for step, inputs, outputs in self.runs:
            if not step:
                assert not any(n.startswith("past.") for n in inputs), "pasts moved outside the step graph"
                made |= set(outputs.values())
                previous = previous and (previous[0], None)
                continue
            state = {n: p for n, p in inputs.items() if n.startswith(STATE)}
            assert None not in state.values()
            pasts = {n: p for n, p in state.items() if n.startswith("past.")}
            shared = {n: p for n, p in state.items() if not n.startswith("past.")}
            assert set(shared.values()) <= made
            if previous is not None:
                assert pasts == {n.replace("present.", "past.", 1): p for n, p in previous[0].items()
                                 if n.startswith("present.")}
                assert previous[1] is None or shared == previous[1]
            previous = outputs, shared
        assert previous is not None
        self.runs.clear()


SPECS = ["tiny", "zoo/transformer-relative", "zoo/universal", "zoo/convs2s", "zoo/lstm-attention", "zoo/gpt2",
         "decoder-only, every causal kind", "recurrent encoder-decoder, no biases, untied"]


@pytest.mark.parametrize("name", SPECS)
def test_device_state_and_tokens_equal_pytorch(name, write_spec, tmp_path):
    spec = shrunk(name) if name not in VARIANTS else load_spec(write_spec(VARIANTS[name]))
    torch.manual_seed(0)
    model = build_module(spec).eval()
    export(model, tmp_path / "onnx", parity=False)
    decoder = OnnxModel(tmp_path / "onnx", device="cpu").decoder()
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        src, prefix = None, rng.integers(4, spec.vocab.tgt_size, (batch, 2))
        if spec.family != "decoder-only":
            src, prefix = rng.integers(4, spec.vocab.size, (batch, 7)), None
            src[-1, 5:] = spec.vocab.pad_id
        for beam in (1, 4):
            options = SearchOptions(beam=beam, max_extra=6, max_length=8)
            with pytest.MonkeyPatch.context() as monkeypatch:
                spy = Spy(monkeypatch)
                ours = search(decoder, src, options, prefix)
                spy.check_search()
            assert ours == search(TorchDecoder(model), src, options, prefix), (batch, beam)


def test_graphs_built_at_run_time_use_the_exported_ir_version(tmp_path, monkeypatch):
    """The graphs built while decoding (the gather of per-source rows, the static cache's
    growth) declare the IR version of the exported graphs: onnxruntime-gpu 1.31 refused the
    first when it carried onnx's newest (found on an H100)."""
    import onnx
    import onnxruntime as ort

    from tfspec.backends.onnx.runtime.static import StaticDecoder

    spec = shrunk("tiny")
    module = build_module(spec).eval()
    export(module, tmp_path / "onnx", parity=False, static_cache=True)
    exported = {onnx.load(str(p), load_external_data=False).ir_version for p in (tmp_path / "onnx").glob("*.onnx")}
    built, session = [], ort.InferenceSession
    monkeypatch.setattr(ort, "InferenceSession", lambda model, *a, **k: (
        built.append(model) if isinstance(model, bytes) else None, session(model, *a, **k))[1])
    src = np.random.default_rng(0).integers(4, spec.vocab.size, (2, 5))
    model = OnnxModel(tmp_path / "onnx", device="cpu")
    decoder = model.decoder()
    decoder.select(decoder.start(src), np.array([1]), cross=True)  # the first sentence ends: its source goes
    options = SearchOptions(beam=3, max_extra=3)
    ours = search(StaticDecoder(model, capture=False, first_length=1), src, options)
    assert ours == search(TorchDecoder(module), src, options)
    assert len(built) == 2 and len(exported) == 1
    assert {onnx.load_from_string(b).ir_version for b in built} == exported


@pytest.mark.parametrize("rows", [[0, 0, 1, 1, 2, 2], [2, 2, 0, 0], [0, 0, 1, 2, 2, 2], [1, 0, 1]],
                         ids=["groups", "groups reordered", "uneven runs", "a source twice"])
def test_rows_read_their_own_source(rows, tmp_path):
    """Per-source values stay one row per source, read by each equal group of rows at once (beam
    search's layout); any other layout of rows still reads each row's own source."""
    spec = shrunk("tiny")
    torch.manual_seed(0)
    export(build_module(spec).eval(), tmp_path / "onnx", parity=False)
    decoder = OnnxModel(tmp_path / "onnx", device="cpu").decoder()
    src = np.random.default_rng(0).integers(4, spec.vocab.size, (3, 6))
    src[1, 4:] = spec.vocab.pad_id
    tokens = np.random.default_rng(1).integers(4, spec.vocab.size, (len(rows), 2))
    state = decoder.select(decoder.start(src), np.array(rows), cross=True)
    got = decoder.run(state, tokens, ["log_probs"])[0]
    for i, r in enumerate(rows):
        alone = decoder.run(decoder.start(src[r:r + 1]), tokens[i:i + 1], ["log_probs"])[0][0]
        assert np.abs(got[i] - alone).max() < 1e-4, (i, r)
