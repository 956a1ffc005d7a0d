"""Padding as data (issue 28): masks say where padding is, never a token id, and prompts of
different lengths decode in one left-padded batch, each row at its own positions.

References: transformers' Qwen2 (pad = bos = eos, the token appearing inside an input), and
each prompt decoded alone (the batch must change no token)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.search import SearchOptions, search
from tfspec.spec import Spec, load_spec
from tests.hf_checkpoints import perturb

LENGTHS = (3, 9, 17)
BASE = {"name": "m", "family": "decoder-only", "vocab": 100, "d_model": 32, "heads": 4, "kv_heads": 2, "d_ff": 64,
        "dropout": 0.0, "norm": "pre", "norm_type": "rms", "gated": True, "activation": "silu",
        "positional": {"kind": "rotary", "max_len": 96}, "decoder": {"layers": 2, "block": ["causal_self_attention",
                                                                                            "ffn"]}}
KINDS = {
    "rotary-gqa": {},
    "learned": {"positional": {"kind": "learned", "max_len": 96}, "norm_type": "layer"},
    "alibi": {"positional": {"kind": "alibi", "max_len": 96}},
    "sliding-window": {"decoder": {"layers": 2, "block": [{"kind": "restricted_self_attention", "r": 5,
                                                           "causal": True}, "ffn"]}},
    "qk-norm-parallel": {"residual": "parallel", "decoder": {"layers": 2, "block": [
        {"kind": "causal_self_attention", "qk_norm": "head"}, "ffn"]}},
}


def left_padded(prompts: list[np.ndarray], pad: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, mask): each prompt at the end of its row, after ``pad``s the mask marks false."""
    width = max(map(len, prompts))
    tokens = np.full((len(prompts), width), pad, dtype=np.int64)
    for row, prompt in zip(tokens, prompts):
        row[width - len(prompt):] = prompt
    starts = width - np.array([len(p) for p in prompts])
    return tokens, np.arange(width)[None, :] >= starts[:, None]


@pytest.fixture(scope="module", params=sorted(KINDS))
def decoder(request):
    torch.manual_seed(0)
    model = build_module(Spec.model_validate(BASE | KINDS[request.param])).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return TorchDecoder(model)


@pytest.fixture(scope="module")
def onnx_decoder(decoder, tmp_path_factory):
    """The same weights exported: the step graph's attention_mask and position_offset."""
    directory = tmp_path_factory.mktemp("export")
    export(decoder.model, directory, parity=False)
    return OnnxModel(directory, device="cpu").decoder()


@pytest.mark.parametrize("backend", ["torch", "onnx"])
@pytest.mark.parametrize("beam", [1, 3])
def test_ragged_prompts_decode_as_each_alone(decoder, onnx_decoder, backend, beam):
    decoder = decoder if backend == "torch" else onnx_decoder
    rng = np.random.default_rng(0)
    prompts = [rng.integers(4, 100, n) for n in LENGTHS]
    prompts[1][4] = decoder.pad  # the pad id as a word: the mask, not the id, says what is padding
    options = SearchOptions(beam=beam, max_extra=6, max_length=6, min_length=6)
    alone = [search(decoder, None, options, prefix=p[None])[0] for p in prompts]
    tokens, mask = left_padded(prompts, decoder.pad)
    assert search(decoder, None, options, prefix=tokens, prefix_mask=mask) == alone


def test_left_padded_logits_equal_each_row_alone(decoder):
    rng = np.random.default_rng(1)
    prompts = [rng.integers(4, 100, n) for n in LENGTHS]
    tokens, mask = left_padded(prompts, decoder.pad)
    model = decoder.model
    with torch.no_grad():
        batch = model.run({"tgt": torch.from_numpy(tokens), "tgt_mask": torch.from_numpy(mask)})["logits"]
        for row, prompt in enumerate(prompts):
            alone = model(torch.from_numpy(prompt)[None])[0]
            torch.testing.assert_close(batch[row, -len(prompt):], alone, atol=1e-4, rtol=0)


def test_the_pad_token_inside_an_input_is_attended_as_in_transformers(cli, tmp_path):
    """Qwen2 pads, starts and ends with one token (<|endoftext|>); inside a prompt it is a
    word: transformers attends it, and so does tfspec given a mask, in scoring and in decoding."""
    transformers = pytest.importorskip("transformers")
    config = transformers.Qwen2Config(vocab_size=120, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      bos_token_id=5, eos_token_id=5, pad_token_id=5, tie_word_embeddings=True)
    torch.manual_seed(0)
    ref = perturb(transformers.Qwen2ForCausalLM(config).eval())
    ref.save_pretrained(tmp_path / "hf")
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    tokens = torch.randint(6, 120, (2, 12))
    tokens[:, 3] = tokens[1, 7] = 5  # the pad = eos token inside the text
    with torch.no_grad():
        theirs = ref(tokens, attention_mask=torch.ones_like(tokens)).logits
        ours = model.run({"tgt": tokens, "tgt_mask": torch.ones_like(tokens)})["logits"]
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)
    want = ref.generate(tokens, attention_mask=torch.ones_like(tokens), max_new_tokens=8, min_new_tokens=8,
                        do_sample=False)[:, 12:]
    got = search(TorchDecoder(model), None, SearchOptions(beam=1, max_length=8, min_length=8, max_extra=8),
                 prefix=tokens.numpy(), prefix_mask=np.ones(tokens.shape, bool))
    assert [list(map(int, row)) for row in want] == got


def test_step_graphs_of_decoders_with_state_beyond_keys_take_no_masks(tmp_path):
    """A convolution carries a window from step to step that a mask cannot clean: such decoders
    keep prompts of one length, in both backends, and say so."""
    from tfspec.errors import TfspecError

    spec = Spec.model_validate(BASE | {"decoder": {"layers": 1, "block": [
        {"kind": "conv", "kernel": 3, "causal": True}, "causal_self_attention", "ffn"]}})
    model = build_module(spec).eval()
    export(model, tmp_path, parity=False)
    for decoder in (TorchDecoder(model), OnnxModel(tmp_path, device="cpu").decoder()):
        assert not decoder.takes_masks
        with pytest.raises(TfspecError, match="prompts of one length"):
            search(decoder, None, SearchOptions(beam=1), prefix=np.array([[0, 5], [6, 7]]),
                   prefix_mask=np.array([[False, True], [True, True]]))


def test_decoders_without_masks_refuse_ragged_prompts():
    from tfspec.errors import TfspecError

    class Plain:
        bos, eos, pad = 1, 2, 0

    with pytest.raises(TfspecError, match="prompts of one length"):
        search(Plain(), None, SearchOptions(beam=1), prefix=np.array([[0, 5], [6, 7]]),
               prefix_mask=np.array([[False, True], [True, True]]))


EOS_PADS = {"name": "m", "family": "encoder-decoder", "vocab": {"size": 60, "pad_id": 2, "bos_id": 1, "eos_id": 2},
            "d_model": 16, "heads": 2, "d_ff": 32, "dropout": 0.0, "positional": {"kind": "sinusoidal", "max_len": 64},
            "encoder": {"layers": 1, "block": ["self_attention", "ffn"]},
            "decoder": {"layers": 1, "block": ["causal_self_attention", "cross_attention", "ffn"]}}
"""A vocabulary with bos and eos of their own and no padding token (most of transformers' decoders):
tfspec pads with </s>, which every source ends with; the masks say which </s> is padding."""


def test_padding_with_eos_validates_and_decodes_as_each_source_alone():
    from tfspec.evaluate import decode_all

    torch.manual_seed(0)
    model = build_module(Spec.model_validate(EOS_PADS)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    rng = np.random.default_rng(2)
    sources = [[*rng.integers(4, 60, n), 2] for n in (3, 8, 5)]  # each ends with eos = pad
    options = SearchOptions(beam=2, max_extra=5, min_length=3)
    decoder = TorchDecoder(model)
    alone = [search(decoder, np.array([s]), options, src_mask=np.ones((1, len(s)), bool))[0] for s in sources]
    assert decode_all(decoder, sources, options, batch=3) == alone


@pytest.mark.parametrize("vocab,needle", [
    ({"size": 60, "pad_id": 60, "bos_id": 1, "eos_id": 2}, "pad_id (60) must be smaller than the vocabulary (60)"),
    ({"size": 60, "eos_ids": [2, 75]}, "eos_ids (75) must be smaller than the vocabulary (60)"),
])
def test_ids_outside_the_vocabulary_are_refused_by_name(vocab, needle):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        Spec.model_validate(EOS_PADS | {"vocab": vocab})
