"""generate.onnx decodes prompts of different lengths in one batch (issue 28): left-padded
``input_ids`` and ``attention_mask`` (1 at real tokens), each row at its own positions.

References: ``tfspec.search.search(prefix_mask=)`` over the same export's step graph, each
prompt decoded alone, transformers' ``generate`` on a left-padded batch (a Llama checkpoint),
and ``translate``'s Python search for the CLI.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.onnx.runtime.generator import Generator
from tfspec.backends.torch import build_module
from tfspec.search import SearchOptions, search
from tfspec.spec import Spec
from tests.hf_checkpoints import save_random
from tests.test_masks_as_data import BASE, KINDS, LENGTHS, left_padded

ort = pytest.importorskip("onnxruntime")

STOPS = {"eos_ids": list(range(10, 70))}
"""More end-of-sequence ids: sentences stop at different steps, so the batch narrows mid-search."""


@pytest.fixture(scope="module", params=["rotary-gqa", "learned", "alibi"])
def exported(request, tmp_path_factory):
    spec = Spec.model_validate(BASE | KINDS[request.param])
    spec = Spec.model_validate(spec.model_dump() | {"vocab": spec.vocab.model_dump() | STOPS})
    torch.manual_seed(0)
    model = build_module(spec).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    directory = tmp_path_factory.mktemp("export")
    export(model, directory, parity=False, generate=True)
    onnx_model = OnnxModel(directory, device="cpu")
    return Generator(onnx_model), onnx_model.decoder()


def scores(generator: Generator, ids: np.ndarray, mask: np.ndarray, beam: int = 1) -> np.ndarray:
    """generate.onnx's ``sequences_scores``: each best hypothesis's penalised log-probability,
    which every prompt token moves (a tiny random model's tokens often do not)."""
    feeds = {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64),
             "max_length": np.array(8), "num_beams": np.array(beam), "length_penalty": np.array(0.6, np.float32),
             "min_length": np.array(8), "max_extra": np.array(8)}
    return generator.session.run(["sequences_scores"], feeds)[0]


@pytest.mark.parametrize("beam", [1, 3])
def test_ragged_prompts_give_the_python_search_tokens_and_each_alone(exported, beam):
    generator, decoder = exported
    assert generator.masks
    rng = np.random.default_rng(0)
    prompts = [rng.integers(4, 100, n) for n in LENGTHS]
    prompts[1][4] = decoder.pad  # the pad id as a word: the mask, not the id, says what is padding
    tokens, mask = left_padded(prompts, decoder.pad)
    prefix, prefix_mask = left_padded([np.r_[decoder.bos, p] for p in prompts], decoder.pad)
    lengths = set()
    for min_length in (4, 0):
        options = SearchOptions(beam=beam, max_extra=8, max_length=8, min_length=min_length)
        ours = generator(tokens, options, mask)
        assert ours == search(decoder, None, options, prefix=prefix, prefix_mask=prefix_mask)
        assert ours == [generator(p[None], options)[0] for p in prompts]
        lengths |= {len(out) for out in ours}
    assert len(lengths) > 1  # rows stopped at different steps: the batch narrowed
    alone = np.concatenate([scores(generator, p[None], np.ones((1, len(p))), beam) for p in prompts])
    np.testing.assert_allclose(scores(generator, tokens, mask, beam), alone, rtol=0, atol=1e-5)


def test_the_mask_not_the_id_says_what_is_padding(exported):
    """A pad-equal token where the mask is 1 is attended; where it is 0 the row decodes as the
    prompt without it (each row's real tokens, in order, whatever padding the caller used)."""
    generator, decoder = exported
    prompt = np.random.default_rng(1).integers(45, 100, 9)
    prompt[3] = decoder.pad
    options = SearchOptions(beam=1, max_extra=8, max_length=8, min_length=8)
    alone = search(decoder, None, options, prefix=np.r_[decoder.bos, prompt][None])
    assert generator(prompt[None], options, np.ones((1, 9), bool)) == alone
    dropped = np.ones((1, 9), bool)
    dropped[0, 3] = False
    assert generator(prompt[None], options, dropped) == [generator(np.delete(prompt, 3)[None], options)[0]]
    ones = np.ones((1, 9))
    np.testing.assert_allclose(scores(generator, prompt[None], dropped),
                               scores(generator, np.delete(prompt, 3)[None], ones[:, 1:]), rtol=0, atol=1e-5)
    assert abs(scores(generator, prompt[None], dropped) - scores(generator, prompt[None], ones))[0] > 1e-3


def test_each_row_keeps_its_own_limits_where_positions_are_bounded(exported):
    """96 positions: a prompt of 90 leaves room for 5 tokens (bos takes a position; the sequence
    fits the positions, its last token included: ``Positional.limit``), one of 3 for max_extra's
    12; one of 120 is cut to its first 94 tokens and gives one token, as each alone."""
    generator, _ = exported
    rng = np.random.default_rng(3)
    prompts = [rng.integers(4, 100, n) for n in (3, 90, 120)]
    options = SearchOptions(beam=2, max_extra=12, min_length=12)  # max_length None: the graph's cap
    tokens, mask = left_padded(prompts, 0)
    ours = generator(tokens, options, mask)
    assert ours == [generator(p[None], options)[0] for p in prompts]
    assert [len(out) for out in ours] == [12, 5, 1]
    assert generator(prompts[2][None, :94], options) == ours[2:]


def test_llama_checkpoint_gives_transformers_generate_tokens_on_a_left_padded_batch(cli, tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=120, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                       bos_token_id=1, eos_token_id=2, pad_token_id=0)
    ref = save_random("LlamaForCausalLM", config, tmp_path / "hf")
    code, _, err = cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    code, out, err = cli("export", tmp_path / "ours", "--weights", tmp_path / "ours" / "model.safetensors",
                         "-o", tmp_path / "onnx", "--generate", "--no-check")
    assert code == 0, out + err
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 120, n) for n in LENGTHS]
    prompts[2][5] = 0  # the pad id as a word
    tokens, mask = left_padded([np.r_[1, p] for p in prompts], 0)  # transformers is given bos; generate.onnx adds it
    want = ref.generate(torch.from_numpy(tokens), attention_mask=torch.from_numpy(mask).long(), max_new_tokens=6,
                        min_new_tokens=6, do_sample=False)[:, tokens.shape[1]:]
    generator = Generator(OnnxModel(tmp_path / "onnx", device="cpu"))
    options = SearchOptions(beam=1, max_extra=6, max_length=6, min_length=6)
    tokens, mask = left_padded(prompts, 0)
    assert generator(tokens, options, mask) == want.tolist()


def test_translate_engine_generate_batches_prompts_of_different_lengths(exported, cli, tmp_path):
    generator, _ = exported
    directory = generator.model.directory
    rng = np.random.default_rng(2)
    (tmp_path / "in.txt").write_text("".join(" ".join(map(str, rng.integers(45, 100, n))) + "\n"
                                             for n in (*LENGTHS, 5, 0, 12)))
    for beam in ("1", "3"):
        args = ("translate", directory, tmp_path / "in.txt", "--beam", beam, "--max-extra", "6", "--batch", "8")
        code, want, _ = cli(*args)
        assert code == 0 and cli(*args, "--engine", "generate")[:2] == (0, want)


def test_decoders_with_state_beyond_keys_keep_prompts_of_one_length(tmp_path):
    """A convolution's window cannot be masked: generate.onnx keeps today's interface."""
    spec = Spec.model_validate(BASE | {"decoder": {"layers": 1, "block": [
        {"kind": "conv", "kernel": 3, "causal": True}, "causal_self_attention", "ffn"]}})
    torch.manual_seed(0)
    export(build_module(spec).eval(), tmp_path, parity=False, generate=True)
    model = OnnxModel(tmp_path, device="cpu")
    generator, decoder = Generator(model), model.decoder()
    assert not generator.masks
    options = SearchOptions(beam=2, max_extra=4, max_length=4, min_length=4)
    assert generator(np.array([[5, 6, 7]]), options) == search(decoder, None, options, prefix=np.array([[1, 5, 6, 7]]))
