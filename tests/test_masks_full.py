"""Padding as data in encoders and full sequences (issue 28): the encoder, full-sequence and
generate graphs take ``attention_mask`` (and an encoder-decoder's ``decoder_attention_mask``),
``TorchModel.run`` ``src_mask``/``tgt_mask``, and tfspec's batchers (translate, training,
fine-tuning) pass the lengths they padded to, so a token equal to the pad id inside an input
is a word. Exports written before (graphs without the inputs) decode as they did.

References: transformers' Marian and BERT given ``attention_mask`` = 1 at a pad-equal token,
each row computed alone (a batch must change nothing), and what the previous commit's
``tfspec translate`` printed for its own export (tests/fixtures/before-masks)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.onnx.runtime.generator import Generator
from tfspec.backends.onnx.runtime.static import StaticDecoder
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.backends.torch.finetune import batches, logits_of
from tfspec.backends.torch.training import Pairs, collate
from tfspec.backends.torch.training.schedule import smoothed_loss
from tfspec.search import SearchOptions, search
from tfspec.spec import Spec, load_spec
from tests.hf_checkpoints import perturb

BEFORE = Path(__file__).parent / "fixtures" / "before-masks"
SEQ2SEQ = {"name": "s", "family": "encoder-decoder", "vocab": 40, "d_model": 32, "heads": 4, "d_ff": 48,
           "dropout": 0.0, "label_smoothing": 0.1, "positional": {"kind": "learned", "max_len": 64},
           "encoder": {"layers": 2, "block": ["self_attention", "ffn"]},
           "decoder": {"layers": 2, "block": ["causal_self_attention", "cross_attention", "ffn"]}}
PAD = 0


def random_module(spec: dict):
    torch.manual_seed(0)
    return perturb(build_module(Spec.model_validate(spec)).eval(), 0.5)


def right_padded(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, mask) of ``rows`` padded on the right with the pad id."""
    width = max(map(len, rows))
    tokens = np.full((len(rows), width), PAD, np.int64)
    for r, row in enumerate(rows):
        tokens[r, :len(row)] = row
    return tokens, np.arange(width)[None, :] < np.array([len(r) for r in rows])[:, None]


def decoded_alone(decoder, row: list[int], options: SearchOptions) -> list[int]:
    """``row`` decoded alone, every token real."""
    return search(decoder, np.array([row]), options, src_mask=np.ones((1, len(row)), bool))[0]


SOURCES = [[5, PAD, 7, 8, 2], [9, 10, PAD, 11, 12, 13, 14, 2], [15, 2]]
"""Three sources with the pad id as a word inside two of them (each ends with eos, 2)."""


@pytest.fixture(scope="module")
def seq2seq(tmp_path_factory):
    """A random encoder-decoder and its export with generate.onnx."""
    model, directory = random_module(SEQ2SEQ), tmp_path_factory.mktemp("seq2seq")
    assert all(check.ok for check in export(model, directory, generate=True, static_cache=True).checks)
    return model, OnnxModel(directory, device="cpu")


def test_right_padded_sources_give_each_source_alone_with_pad_words_attended(seq2seq):
    model, onnx = seq2seq
    src, mask = right_padded(SOURCES)
    tgt = np.array([[1, 6, PAD, 7]] * len(SOURCES))  # the pad id inside targets too (start token 1)
    with torch.no_grad():
        batch = model.run({"src": torch.from_numpy(src), "src_mask": torch.from_numpy(mask),
                           "tgt": torch.from_numpy(tgt), "tgt_mask": torch.ones(tgt.shape, dtype=torch.bool)})
        scored = onnx.logits(src=src, attention_mask=mask, tgt=tgt, decoder_attention_mask=np.ones_like(tgt))
        memory = onnx.run("encoder", ["memory"], {"src": src, "attention_mask": mask})[0]
        for r, row in enumerate(SOURCES):
            alone = model.run({"src": torch.tensor([row]), "src_mask": torch.ones(1, len(row), dtype=torch.bool),
                               "tgt": torch.from_numpy(tgt[r:r + 1]), "tgt_mask": torch.ones(1, 4, dtype=torch.bool)})
            torch.testing.assert_close(batch["logits"][r], alone["logits"][0], atol=1e-4, rtol=0)
            np.testing.assert_allclose(scored[r], alone["logits"][0].numpy(), atol=1e-4, rtol=0)
            np.testing.assert_allclose(memory[r, :len(row)], onnx.run("encoder", ["memory"], {
                "src": np.array([row]), "attention_mask": np.ones((1, len(row)), np.int64)})[0][0], atol=1e-4, rtol=0)
    options = SearchOptions(beam=3, max_extra=6)
    each = [decoded_alone(TorchDecoder(model), row, options) for row in SOURCES]
    assert search(TorchDecoder(model), src, options, src_mask=mask) == each
    assert search(onnx.decoder(), src, options, src_mask=mask) == each
    assert search(StaticDecoder(onnx, capture=False, first_length=4), src, options, src_mask=mask) == each
    assert Generator(onnx)(src, options, mask) == each
    assert search(TorchDecoder(model), src, options) != each  # the pad id read as padding hides the words


def test_translate_feeds_the_mask_its_batcher_knows(seq2seq, cli, tmp_path):
    """`tfspec translate` (both engines) pads a batch itself and says where: a pad-equal id typed
    inside a line is a word, as when that line is translated alone."""
    model, onnx = seq2seq
    lines = [" ".join(map(str, row[:-1])) for row in SOURCES]  # translate appends eos itself
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    options = SearchOptions(beam=2, max_extra=5, max_length=63)
    each = [" ".join(map(str, decoded_alone(onnx.decoder(), row, options))) for row in SOURCES]
    for engine in ("search", "generate"):
        code, out, err = cli("translate", onnx.directory, tmp_path / "in.txt", "--beam", "2", "--max-extra", "5",
                             "--engine", engine)
        assert code == 0, err
        assert out.splitlines() == each


def test_left_padded_rows_of_the_full_sequence_graph_count_their_own_positions(tmp_path):
    """Learned positions: a left-padded row scored in a batch gives its logits alone, in ONNX as in PyTorch."""
    spec = SEQ2SEQ | {"family": "decoder-only", "encoder": None,
                      "decoder": {"layers": 2, "block": ["causal_self_attention", "ffn"]}}
    model = random_module(spec)
    export(model, tmp_path, parity=False)
    onnx = OnnxModel(tmp_path, device="cpu")
    rows = [[5, PAD, 7, 8, 9, 10], [11, 12, 13], [PAD, 14]]
    width = max(map(len, rows))
    tokens, mask = np.full((3, width), PAD, np.int64), np.zeros((3, width), bool)
    for r, row in enumerate(rows):
        tokens[r, width - len(row):], mask[r, width - len(row):] = row, True
    got = onnx.logits(tgt=tokens, attention_mask=mask)
    with torch.no_grad():
        torch_batch = model.run({"tgt": torch.from_numpy(tokens), "tgt_mask": torch.from_numpy(mask)})["logits"]
        for r, row in enumerate(rows):
            alone = model.run({"tgt": torch.tensor([row]), "tgt_mask": torch.ones(1, len(row), dtype=torch.bool)})
            np.testing.assert_allclose(got[r, width - len(row):], alone["logits"][0].numpy(), atol=1e-4, rtol=0)
            torch.testing.assert_close(torch_batch[r, width - len(row):], alone["logits"][0], atol=1e-4, rtol=0)


def test_a_training_batch_loses_what_its_rows_lose_alone_with_pad_words_inside():
    """The trainer's batch (``collate``), its masks passed to the model and the loss: the sum of
    each pair's own loss, the pad-equal words inside sources and targets scored and attended."""
    model = random_module(SEQ2SEQ)
    targets = [[1, 6, PAD, 7, 2], [1, 8, 2], [1, PAD, 9, 10, 11, 12, 2]]
    pairs = Pairs([np.array(s, np.int32) for s in SOURCES], [np.array(t, np.int32) for t in targets])

    def loss(index):
        batch = collate(pairs, np.array(index), PAD)
        logits = model(batch["src"], batch["tgt_in"], src_mask=batch["src_mask"], tgt_mask=batch["tgt_mask"])
        return smoothed_loss(logits, batch["tgt_out"], PAD, 0.1, batch["loss_mask"])

    with torch.no_grad():
        together, alone = loss([0, 1, 2]), [loss([i]) for i in range(3)]
    for got, want in zip(together, map(sum, zip(*alone))):
        assert got.item() == pytest.approx(want.item(), rel=1e-5)


def test_fine_tuning_batches_mask_by_length(tmp_path):
    """A classifier's batch (``finetune.batches``) gives each text's logits alone (the mean
    over each text's own positions)."""
    spec = SEQ2SEQ | {"family": "encoder-only", "decoder": None,
                      "head": {"kind": "sequence_classification", "classes": 3, "pooling": "mean"}}
    model = random_module(spec)
    texts = [row[:-1] for row in SOURCES]
    (index, tokens, mask), = batches(texts, 8, PAD)
    with torch.no_grad():
        got = logits_of(model, tokens, mask)
        for r, text in zip(index, texts):
            alone = logits_of(model, torch.tensor([text]), torch.ones(1, len(text), dtype=torch.bool))
            torch.testing.assert_close(got[r], alone[0], atol=1e-4, rtol=0)


@pytest.mark.parametrize("kind", ["marian", "bert-mlm"])
def test_a_pad_equal_token_inside_an_encoder_input_is_attended_as_in_transformers(kind, cli, tmp_path):
    """Marian's pad id (89) and BERT's (0) inside sources, attention_mask 1 there: transformers'
    logits in PyTorch and onnxruntime, and (Marian) its greedy tokens from translate's search."""
    pytest.importorskip("transformers")
    if kind == "marian":
        from test_import_seq2seq import batch, ids, save

        pad = ids("marian")[0]
        ref = save("marian", tmp_path / "hf")
        src, tgt = batch("marian")
        src[0, 3] = src[2, 1] = src[1, 2] = pad  # words, not padding: row 1 is padded after 6 tokens
        mask = torch.ones_like(src, dtype=torch.bool)
        mask[1, 6:] = False
        with torch.no_grad():
            want = ref(input_ids=src, attention_mask=mask.long(), decoder_input_ids=tgt).logits
        feeds, onnx_feeds = {"src": src, "src_mask": mask, "tgt": tgt}, {"src": src, "attention_mask": mask, "tgt": tgt}
    else:
        from hf_checkpoints import padded_batch, reference, save_checkpoint

        save_checkpoint("bert-mlm", tmp_path / "hf")
        src, mask = padded_batch("bert")
        pad, src[0, 4], src[2, 9] = 0, 0, 0
        with torch.no_grad():
            want = reference(tmp_path / "hf", "bert-mlm")(input_ids=src, attention_mask=mask.long()).logits
        feeds, onnx_feeds = {"src": src, "src_mask": mask}, {"src": src, "attention_mask": mask}
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "ours", "--quiet")[0] == 0
    model = build_module(load_spec(tmp_path / "ours")).eval()
    load_weights(model, tmp_path / "ours" / "model.safetensors")
    keep = mask if kind == "bert-mlm" else torch.ones(tgt.shape, dtype=torch.bool)
    with torch.no_grad():
        torch.testing.assert_close(model.run(feeds)["logits"][keep], want[keep], atol=1e-4, rtol=0)
        assert (model.run({"src": src} | ({"tgt": tgt} if kind == "marian" else {}))["logits"][keep]
                - want[keep]).abs().max() > 1e-2  # the pad id read as padding computes something else
    code, out, err = cli("export", tmp_path / "ours", "-o", tmp_path / "onnx")
    assert code == 0, out + err
    onnx = OnnxModel(tmp_path / "onnx", device="cpu")
    got = onnx.logits(**{k: v.numpy() for k, v in onnx_feeds.items()})
    np.testing.assert_allclose(got[keep.numpy()], want[keep].numpy(), atol=1e-4, rtol=0)
    if kind == "marian":
        eos = ids("marian")[1]
        generated = ref.generate(src, attention_mask=mask.long(), num_beams=1, do_sample=False, max_new_tokens=12,
                                 forced_eos_token_id=None, bad_words_ids=[[pad]])[:, 1:].tolist()
        expected = [row[:row.index(eos)] if eos in row else row for row in generated]
        options = SearchOptions(beam=1, max_extra=12, max_length=12)
        assert search(TorchDecoder(model), src.numpy(), options, src_mask=mask.numpy()) == expected
        assert search(onnx.decoder(), src.numpy(), options, src_mask=mask.numpy()) == expected


def test_an_export_from_before_masks_translates_and_scores_as_it_did(cli, tmp_path):
    """tests/fixtures/before-masks: a tiny encoder-decoder exported (with generate.onnx) at commit
    21dbf89, whose graphs find padding by id and take no mask; the tokens its `tfspec translate`
    printed (both engines, greedy and beam 4) and its full-sequence logits on a padded batch."""
    recorded = json.loads((BEFORE / "seq2seq-onnx-tokens.json").read_text())
    (tmp_path / "in.txt").write_text("\n".join(recorded["lines"]) + "\n")
    for engine, outputs in recorded["outputs"].items():
        for beam, lines in outputs.items():
            code, out, err = cli("translate", BEFORE / "seq2seq-onnx", tmp_path / "in.txt", "--beam", beam,
                                 "--engine", engine, "--max-extra", str(recorded["max_extra"]))
            assert code == 0, err
            assert out.splitlines() == lines
    onnx = OnnxModel(BEFORE / "seq2seq-onnx", device="cpu")
    scored = load_file(str(BEFORE / "seq2seq-logits.safetensors"))
    assert "attention_mask" not in {i.name for i in onnx.sessions["encoder"].get_inputs()}
    for masks in ({}, {"attention_mask": scored["src"] != PAD}):  # a mask given to such a graph is left out
        got = onnx.logits(src=scored["src"], tgt=scored["tgt"], **masks)
        np.testing.assert_allclose(got, scored["logits"], atol=1e-6, rtol=0)
