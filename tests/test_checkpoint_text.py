"""Text in and out with an imported checkpoint's own tokenizer: a small random Marian model
with sentencepiece models trained here on the shipped sample and a vocab.json written as
MarianTokenizer expects, imported, exported and run by `tfspec translate`; its ids equal
MarianTokenizer's and its output equals transformers' detokenised `generate`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tfspec.data import read_split, sample_dir
from tfspec.data.codecs import open_codec
from tfspec.spec import load_spec

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # MarianTokenizer never calls it

LINES = ["Select the cell.", "Click OK to close the dialog!", "Ümlaute: größer, Maß — 42 % (x²)", "",
         "A line with   several   spaces and an unseen word: zyxwvut."]


def train_spm(lines: list[str], prefix: Path, size: int) -> Path:
    import sentencepiece as spm

    with open(os.devnull, "w") as quiet:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=size,
                                       model_type="unigram", character_coverage=1.0, num_threads=1, logstream=quiet)
    return prefix.with_suffix(".model")


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """(checkpoint directory, transformers model, MarianTokenizer): Marian's layout, eos 0,
    unk 1, the pieces of both sentencepiece models, <pad> last."""
    tmp = tmp_path_factory.mktemp("marian")
    pairs = read_split(sample_dir(), "train")[:400]
    source = train_spm([en for en, _ in pairs], tmp / "source", 300)
    target = train_spm([de for _, de in pairs], tmp / "target", 300)
    import sentencepiece as spm

    pieces = ["</s>", "<unk>"]
    for path in (source, target):
        model = spm.SentencePieceProcessor(model_file=str(path))
        pieces += [p for p in map(model.id_to_piece, range(model.get_piece_size())) if p not in pieces
                   and not model.is_control(model.piece_to_id(p)) and not model.is_unknown(model.piece_to_id(p))]
    vocab = {piece: i for i, piece in enumerate(pieces + ["<pad>"])}
    (tmp / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = transformers.MarianTokenizer(str(source), str(target), str(tmp / "vocab.json"))
    pad = vocab["<pad>"]
    config = transformers.MarianConfig(vocab_size=len(vocab), d_model=32, encoder_layers=2, decoder_layers=2,
                                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                       decoder_ffn_dim=64, max_position_embeddings=128, pad_token_id=pad,
                                       decoder_start_token_id=pad, eos_token_id=0, scale_embedding=True)
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():  # far from the init, so outputs depend on the source
        for name, p in model.named_parameters():
            if p.requires_grad:
                p.normal_(1.0 if "norm" in name and name.endswith("weight") else 0.0, 0.2)
    transformers.utils.logging.disable_progress_bar()
    model.save_pretrained(tmp / "hf")
    tokenizer.save_pretrained(tmp / "hf")
    return tmp / "hf", model, tokenizer


def _vocab(directory: Path):
    """The spec's vocabulary as `tfspec import` maps the checkpoint's config."""
    from tfspec.interop.hf.checkpoint import read_vocabulary
    from tfspec.interop.hf.family import FAMILIES, Source
    from tfspec.spec import Spec

    config = json.loads((directory / "config.json").read_text())
    data = FAMILIES["marian"]().spec_data(Source(config, "config.json", "MarianMTModel", None,
                                                 read_vocabulary(directory)))
    return Spec.model_validate({"name": "m", **data}).vocab


def test_marian_ids_equal_marian_tokenizers(marian):
    directory, _, tokenizer = marian
    codec = open_codec(directory, _vocab(directory))
    pairs = read_split(sample_dir(), "dev")[:100]
    for line in LINES + [en for en, _ in pairs]:
        assert codec.encode(line) == tokenizer(line).input_ids, line
    for _, de in pairs:
        ids = tokenizer(text_target=de).input_ids
        assert codec.decode(ids) == tokenizer.decode(ids, skip_special_tokens=True), de


def test_translate_prints_what_generate_decodes(marian, cli, tmp_path):
    directory, model, tokenizer = marian
    code, _, err = cli("import", directory, "-o", tmp_path / "ours", "--quiet")
    assert code == 0, err
    assert {"source.spm", "target.spm", "vocab.json"} <= {p.name for p in (tmp_path / "ours").iterdir()}
    code, out, err = cli("export", tmp_path / "ours", "--weights", tmp_path / "ours" / "model.safetensors",
                         "-o", tmp_path / "onnx", "--no-check")
    assert code == 0 and "tokenizer: " in out, out + err
    (tmp_path / "lines.txt").write_text("\n".join(LINES) + "\n")
    code, out, err = cli("translate", tmp_path / "onnx", tmp_path / "lines.txt", "--beam", "1", "--max-extra", "8")
    assert code == 0, err
    expected = []
    for line in LINES:
        if not line:
            expected.append("")
            continue
        ids = tokenizer(line, return_tensors="pt")
        generated = model.generate(**ids, num_beams=1, do_sample=False, max_new_tokens=ids.input_ids.shape[1] + 8,
                                   bad_words_ids=[[model.config.pad_token_id]], forced_eos_token_id=None)
        expected.append(tokenizer.decode(generated[0], skip_special_tokens=True))
    assert out.splitlines() == expected
    assert sum(map(len, expected)) > 40  # real text came out
    assert load_spec(tmp_path / "ours").vocab.pad_id == model.config.pad_token_id


def test_tokenizer_json_without_the_library_is_one_clear_line(tmp_path, monkeypatch):
    from tfspec.errors import TfspecError
    from tfspec.spec import Spec

    (tmp_path / "tokenizer.json").write_text("{}")
    monkeypatch.setitem(__import__("sys").modules, "tokenizers", None)  # as if not installed
    vocab = Spec.model_validate({"vocab": 10, "decoder": {"layers": 1, "block": ["causal_self_attention"]},
                                 "family": "decoder-only"}).vocab
    with pytest.raises(TfspecError, match=r"tokenizer.json needs the tokenizers library: pip install 'tfspec\[hf\]'"):
        open_codec(tmp_path, vocab)
