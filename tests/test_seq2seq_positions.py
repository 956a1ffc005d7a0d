"""What published encoder-decoders need beyond the paper: the sinusoid table in halves
(Marian), a learned table with unused leading rows (BART) and a decoder that starts from the
padding token (Marian, T5): against transformers' own tables, and both backends against
each other through the ONNX export's parity check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import DecodeState, build_module
from tfspec.ir import build_graph
from tfspec.ir.positions import sinusoids
from tfspec.spec import Spec

SEQ2SEQ = {"family": "encoder-decoder", "vocab": {"size": 50, "pad_id": 49, "bos_id": 49, "eos_id": 0, "unk_id": 1},
           "d_model": 16, "heads": 2, "d_ff": 32, "dropout": 0.0, "tie_embeddings": "all",
           "encoder": {"layers": 2, "block": ["self_attention", "ffn"]},
           "decoder": {"layers": 2, "block": ["causal_self_attention", "cross_attention", "ffn"]}}
CASES = {"halves-start-with-pad": {"positional": {"kind": "sinusoidal", "max_len": 64, "layout": "halves"},
                                   "output_bias": True, "activation": "silu"},
         "learned-offset": {"positional": {"kind": "learned", "max_len": 64, "offset": 2}, "embed_norm": True,
                            "embed_scale": False, "activation": "gelu"}}


@pytest.mark.parametrize("d_model", [16, 15])
def test_halves_equal_marians_table(d_model):
    transformers = pytest.importorskip("transformers")
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    theirs = MarianSinusoidalPositionalEmbedding(40, d_model).create_weight().numpy()
    np.testing.assert_allclose(sinusoids(40, d_model, "halves"), theirs, atol=1e-6)
    interleaved = sinusoids(40, d_model)
    assert np.allclose(interleaved[:, 0::2], theirs[:, : (d_model + 1) // 2], atol=1e-6)


def test_offset_adds_rows_to_the_learned_table():
    spec = Spec.model_validate(SEQ2SEQ | CASES["learned-offset"])
    assert build_graph(spec).params["encoder.pos.weight"].shape == (66, 16)


def model_of(case: str):
    torch.manual_seed(0)
    model = build_module(Spec.model_validate(SEQ2SEQ | CASES[case])).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():  # biases and gains away from their 0 and 1
            if p.dim() == 1:
                p.normal_(1.0 if "norm" in name else 0.0, 0.2)
    return model


@pytest.mark.parametrize("case", CASES)
def test_both_backends_agree(case, tmp_path):
    result = export(model_of(case), tmp_path)
    assert result.ok, [str(c) for c in result.checks if not c.ok]


@torch.no_grad()
def test_a_target_starting_with_the_pad_token_is_not_padding(tmp_path):
    """Full-sequence logits equal step-by-step decoding (which masks no target token), in
    PyTorch and in the exported full graph, though every target starts with the pad id."""
    model = model_of("halves-start-with-pad")
    src = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 49]])
    tgt = torch.tensor([[49, 3, 4, 5], [49, 6, 7, 8]])
    full = model(src, tgt)
    memory = model.run({"src": src}, ("memory",))["memory"]
    state = DecodeState(memory=memory, src_padding=src == 49)
    steps = torch.cat([model.run({"tgt": tgt[:, i:i + 1]}, state=state)["logits"] for i in range(4)], 1)
    torch.testing.assert_close(full, steps, atol=1e-5, rtol=0)
    export(model, tmp_path, parity=False)
    np.testing.assert_allclose(OnnxModel(tmp_path, device="cpu").logits(src=src.numpy(), tgt=tgt.numpy()), full.numpy(),
                               atol=1e-4)


@pytest.mark.parametrize("positional,needles", [
    ({"kind": "learned", "layout": "halves"}, ["layout", "kind is learned", "set kind: sinusoidal"]),
    ({"kind": "rotary", "offset": 2}, ["offset shapes learned or sinusoidal", "kind is rotary", "set kind: learned"]),
    ({"kind": "learned", "spacing": "endpoint"}, ["spacing", "kind is learned", "set kind: sinusoidal"]),
    ({"kind": "relative_bias", "tables": "stack", "spacing": "endpoint"}, ["spacing", "kind is relative_bias"]),
    ({"kind": "alibi", "tables": "layer"}, ["tables", "kind is alibi", "set kind: relative_bias"]),
    ({"kind": "sinusoidal", "layout": "split"}, ["positional.layout", "'interleaved' or 'halves'"]),
])
def test_options_of_another_kind_are_refused(positional, needles, write_spec, cli):
    import yaml

    code, _, err = cli("validate", write_spec(yaml.safe_dump(SEQ2SEQ | {"name": "m", "positional": positional})))
    assert code == 2 and all(n in err for n in needles), err


@torch.no_grad()
def test_left_padded_source_as_long_as_the_target_leaves_the_decoders_rotation_alone():
    """The encoder's rows count positions from their first real token, the decoder's from 0:
    a rotation table built for one sequence must not serve the other, even at equal lengths.
    Reference: each row run alone, without padding."""
    torch.manual_seed(0)
    spec = Spec.model_validate(SEQ2SEQ | {"positional": {"kind": "rotary", "max_len": 64}})
    model = build_module(spec).eval()
    for p in model.parameters():
        p.normal_(0, 0.3)
    src = torch.tensor([[49, 49, 5, 6, 7], [8, 9, 10, 11, 12]])
    src_mask = src != 49
    tgt = torch.tensor([[2, 3, 4, 5, 6], [7, 8, 9, 10, 11]])
    batch = model.run({"src": src, "tgt": tgt, "src_mask": src_mask, "tgt_mask": torch.ones_like(tgt)})["logits"]
    for row in range(2):
        alone = model.run({"src": src[row][src_mask[row]][None], "tgt": tgt[row][None]})["logits"][0]
        torch.testing.assert_close(batch[row], alone, atol=1e-5, rtol=0)
