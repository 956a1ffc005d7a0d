"""The in-place cache (``export --fused``'s ``decoder_inplace``): GroupQueryAttention extends
key/value buffers where they lie, and decoding over it gives PyTorch's tokens.

References: the PyTorch backend's search (tokens, greedy and beam 4, buffers made to grow and
rows reordered), and the standard step graph's presents (the values a step writes).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch

from tfspec import load_spec
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.onnx.runtime.decoding import OnnxDecoder
from tfspec.backends.onnx.runtime.inplace import Buffers, InPlaceDecoder
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.errors import TfspecError
from tfspec.search import SearchOptions, search

from tests.test_fused_export import ROTARY_DECODER
from tests.test_masks_as_data import left_padded
from tests.test_onnx import shrunk

pytest.importorskip("onnxruntime")


def exported(spec, path) -> tuple[torch.nn.Module, OnnxModel]:
    torch.manual_seed(0)
    model = build_module(spec).eval()
    export(model, path, parity=False, fused=True)
    return model, OnnxModel(path, device="cpu")


LEARNED_DECODER = ROTARY_DECODER.replace("positional: {kind: rotary}", "positional: {kind: learned, max_len: 64}")


@pytest.mark.parametrize("name", ["tiny", "rotary", "learned"])
def test_in_place_decoding_gives_pytorchs_tokens(name, tmp_path, write_spec):
    """Encoder-decoder, decoder-only with rotary positions and 2 key/value heads for 4 query
    heads, and the same with learned positions: the buffers start at 4 slots and grow."""
    text = {"rotary": ROTARY_DECODER, "learned": LEARNED_DECODER}.get(name)
    spec = load_spec(write_spec(text) if text else name)
    model, onnx_model = exported(spec, tmp_path / "onnx")
    assert "decoder_inplace" in onnx_model.manifest["graphs"]
    assert isinstance(onnx_model.decoder(), InPlaceDecoder)
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        if spec.family == "decoder-only":
            src, prefix = None, rng.integers(4, spec.vocab.tgt_size, (batch, 3))
        else:
            src, prefix = rng.integers(4, spec.vocab.size, (batch, 7)), None
            src[-1, 5:] = spec.vocab.pad_id
        for beam in (1, 4):
            options = SearchOptions(beam=beam, max_extra=12, max_length=14)
            ours = search(InPlaceDecoder(onnx_model, first_length=4), src, options, prefix)
            assert ours == search(TorchDecoder(model), src, options, prefix), (batch, beam)


@pytest.mark.parametrize("name", ["rotary", "learned"])
@pytest.mark.parametrize("beam", [1, 3])
def test_prompts_of_different_lengths_decode_as_pytorch_decodes_them(name, beam, tmp_path, write_spec):
    """Left-padded prompts in one batch: padded keys masked through GroupQueryAttention's
    attention_bias, each row's positions its own; PyTorch decodes the same padded batch."""
    spec = load_spec(write_spec({"rotary": ROTARY_DECODER, "learned": LEARNED_DECODER}[name]))
    model, onnx_model = exported(spec, tmp_path / "onnx")
    rng = np.random.default_rng(2)
    prompts = [rng.integers(4, spec.vocab.tgt_size, n) for n in (5, 2, 7)]
    tokens, mask = left_padded(prompts, spec.vocab.pad_id)
    options = SearchOptions(beam=beam, max_extra=8, max_length=8, min_length=8)
    ours = search(InPlaceDecoder(onnx_model, first_length=4), None, options, prefix=tokens, prefix_mask=mask)
    assert ours == search(TorchDecoder(model), None, options, prefix=tokens, prefix_mask=mask)


@pytest.mark.parametrize("name, packed", [("tiny", True), ("learned", True), ("rotary", False)])
def test_the_projection_goes_in_whole_where_nothing_changes_its_parts(name, packed, tmp_path, write_spec):
    """GroupQueryAttention reads the fused QKV projection packed (no Split and Reshapes per
    layer) unless the keys change between the split and it (rotary positions turn them); the
    tokens of both forms are held to PyTorch's by ``test_in_place_decoding_gives_pytorchs_tokens``."""
    text = {"rotary": ROTARY_DECODER, "learned": LEARNED_DECODER}.get(name)
    spec = load_spec(write_spec(text) if text else name)
    _, onnx_model = exported(spec, tmp_path / "onnx")
    graph = onnx.load(str(tmp_path / "onnx" / "decoder_inplace.onnx")).graph
    attention = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    assert len(attention) == spec.decoder.layers
    assert all((n.input[1] == n.input[2] == "") == packed for n in attention)
    assert any(n.op_type == "Split" for n in graph.node) != packed


def test_a_step_writes_its_keys_into_the_buffers_themselves(tmp_path):
    """After each step the buffers are the same memory, holding at the new slot what the
    standard step graph appends to its present, and the earlier slots unchanged."""
    _, onnx_model = exported(load_spec("tiny"), tmp_path / "onnx")
    src = np.random.default_rng(1).integers(4, 1000, (2, 6))
    ours, theirs = InPlaceDecoder(onnx_model, first_length=8), OnnxDecoder(onnx_model)
    mine, ref = ours.start(src), theirs.start(src)
    name = ours.pasts[0]
    address = mine.values[name].data_ptr()
    tokens = np.full((2, 1), onnx_model.spec.vocab.bos_id)
    for step in range(5):
        before = mine.values[name].numpy().copy()
        *_, mine = ours.run(mine, tokens, [])
        *_, ref = theirs.run(ref, tokens, [])
        buffer, present = mine.values[name].numpy(), ref.values[name].numpy()
        assert mine.values[name].data_ptr() == address
        assert np.abs(buffer[:, :, : step + 1] - present).max() < 1e-5
        assert np.array_equal(buffer[:, :, :step], before[:, :, :step])
        tokens = tokens + 1


def test_steps_through_the_kept_binding_give_the_standard_steps_candidates(tmp_path):
    """Search steps after the first rebind only the tokens and the offset (``_Steady``): each
    step's top-k, for whatever k it asks, is the standard step graph's, values and ids."""
    _, onnx_model = exported(load_spec("tiny"), tmp_path / "onnx")
    src = np.random.default_rng(4).integers(4, 1000, (2, 6))
    ours, theirs = InPlaceDecoder(onnx_model, first_length=4), OnnxDecoder(onnx_model)
    mine, ref = ours.start(src), theirs.start(src)
    tokens = np.full((2, 1), onnx_model.spec.vocab.bos_id)
    for k in (1, 1, 5, 5, 3, 7, 7, 1):
        values, ids, mine = ours.step(mine, tokens, k)
        want_values, want_ids, ref = theirs.step(ref, tokens, k)
        assert ids.shape[1] >= k and np.array_equal(ids[:, :k], want_ids[:, :k]), k
        assert np.abs(values[:, :k] - want_values[:, :k]).max() < 1e-4, k
        tokens = ids[:, 1:2]  # not the likeliest: the two graphs' paths are compared off the greedy one


@pytest.mark.parametrize("name, why", [("zoo/transformer-relative", "scores"), ("zoo/mistral-7b", "causal"),
                                       ("zoo/gpt2", "wide")])
def test_what_the_buffers_cannot_hold_keeps_the_standard_step(name, why, tmp_path):
    """Relative position terms, a sliding window and heads 4 wide are not GroupQueryAttention's:
    the export says which layer kept the standard step graph, and decoding uses it."""
    _, onnx_model = exported(shrunk(name), tmp_path / "onnx")
    manifest = json.loads((tmp_path / "onnx" / "tfspec.json").read_text())
    assert "decoder_inplace" not in manifest["graphs"]
    assert manifest["in_place_cache"].startswith("not written: decoder.layers.0.") and why in manifest["in_place_cache"]
    assert type(onnx_model.decoder()) is OnnxDecoder
    with pytest.raises(TfspecError, match="--fused"):
        onnx_model.decoder(in_place=True)


@pytest.mark.parametrize("rows", [[0, 2], [2, 2, 0, 1]])
def test_rows_that_leave_or_move_decode_as_in_the_standard_step_graph(rows, tmp_path):
    """Sentences ending (rows kept in order: gathered in the buffers) and beam search's
    reordering (rows repeated: the cache handed to the standard step graph) give the
    log-probabilities the standard step graph gives after the same selections."""
    _, onnx_model = exported(load_spec("small").model_copy(update={"name": "small-800", "vocab": load_spec(
        "small").vocab.model_copy(update={"size": 800})}), tmp_path / "onnx")
    src = np.random.default_rng(3).integers(4, 800, (3, 6))
    ours, theirs = InPlaceDecoder(onnx_model), OnnxDecoder(onnx_model)
    states = [ours.start(src), theirs.start(src)]
    tokens = np.full((3, 1), onnx_model.spec.vocab.bos_id)
    for step in range(4):
        if step == 2:
            states = [ours.select(states[0], np.array(rows), cross=True),
                      theirs.select(states[1], np.array(rows), cross=True)]
            tokens = tokens[rows]
        (mine, states[0]), (want, states[1]) = ours.run(states[0], tokens, ["log_probs"]), theirs.run(
            states[1], tokens, ["log_probs"])
        assert np.abs(mine - want).max() < 1e-4, step
        tokens = want.argmax(-1)[:, None]
    assert isinstance(states[0], Buffers) == (rows == [0, 2])


def test_cli_exports_translates_and_says_when_it_cannot(cli, tmp_path, write_spec):
    """`export --fused` checks the in-place graph with the rest and `translate` names it; a
    model it cannot serve gets one note saying which layer and why."""
    code, out, _ = cli("export", "tiny", "-o", tmp_path / "tiny", "--fused")
    assert code == 0 and "ok   in-place step graph, greedy and beam 4" in out and "parity: ok" in out
    (tmp_path / "in.txt").write_text("5 6 7 8 9\n", encoding="utf-8")
    code, out, err = cli("translate", tmp_path / "tiny", tmp_path / "in.txt")
    assert code == 0 and out.strip() and "in-place cache" in err
    relative = write_spec(ROTARY_DECODER.replace("positional: {kind: rotary}", "positional: {kind: alibi}"))
    code, out, _ = cli("export", relative, "-o", tmp_path / "alibi", "--fused", "--no-check")
    notes = [line for line in out.splitlines() if line.startswith("note: in-place cache not written")]
    assert code == 0 and len(notes) == 1 and "decoder.layers.0." in notes[0]
