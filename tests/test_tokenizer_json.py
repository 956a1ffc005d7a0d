"""tokenizer.json written from tfspec's sentencepiece models: Python's ``tokenizers`` reading it
gives sentencepiece's ids and text (sentencepiece itself is the reference), and export ships it."""

from __future__ import annotations

import random

import pytest

from tfspec.data import sample_dir, train_tokenizer
from tfspec.data.codecs import HFCodec, SentencePieceCodec, open_codec
from tfspec.data.tokenizer_json import tokenizer_json, write_tokenizer_json
from tfspec.errors import TfspecError
from tfspec.spec import load_spec

tokenizers = pytest.importorskip("tokenizers")
spm = pytest.importorskip("sentencepiece")

EOS = 2
# What sentencepiece's normaliser and decoder treat specially: runs and edges of spaces, the
# whitespace symbol itself, special tokens' names as text, characters outside the vocabulary.
EDGES = ["", " ", "  Select  the   cell.  ", "\tTab\tand\u00a0space ", "\u2581", " \u2581 ", "x \u2581", "\u2581x",
         "a\u2581\u2581 b", "</s> ends <s> nothing <pad> <unk>", "😀😀 ab😀 中文", "ein-/aus (An/Aus) 100%"]


@pytest.fixture(scope="module", params=[("bpe", 8000), ("unigram", 1000)], ids=["bpe", "unigram"])
def converted(request, tmp_path_factory):
    """(sentencepiece processor, tokenizers.Tokenizer of its tokenizer.json, model path): the
    sample's tokenizer as `tfspec train` makes it (bpe at small's 8k; unigram at 1k, as many as
    the sample's text allows)."""
    kind, size = request.param
    root = tmp_path_factory.mktemp(kind)
    model = train_tokenizer(sample_dir(), size, kind, out_dir=root)
    path = write_tokenizer_json(model, root / "tokenizer.json")
    return spm.SentencePieceProcessor(model_file=str(model)), tokenizers.Tokenizer.from_file(str(path)), model


def sample_lines(split: str) -> list[str]:
    return [line for side in ("en", "de") for line in (sample_dir() / f"{split}.{side}").read_text().splitlines()]


def test_ids_and_text_equal_sentencepiece_on_the_sample_test_split(converted):
    sp, tokenizer, _ = converted
    lines = sample_lines("test")
    assert len(lines) == 400
    for line in lines:
        ids = sp.encode(line)
        assert tokenizer.encode(line).ids == ids + [EOS], line  # end of sentence, as translate appends it
        assert tokenizer.decode(ids) == sp.decode(ids)


def test_edges_of_whitespace_special_names_and_unknown_characters(converted):
    sp, tokenizer, _ = converted
    rng = random.Random(0)
    alphabet = list(" \t\u2581ab.()<>/s\u00e4😀中\u3000") + ["</s>", "<unk>", "  "]
    fuzz = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10))) for _ in range(300)]
    for text in EDGES + fuzz:
        assert tokenizer.encode(text).ids == sp.encode(text) + [EOS], repr(text)


def test_any_ids_decode_as_sentencepiece_decodes_them(converted):
    """Model outputs are any ids: control pieces vanish, <unk> is written ' ⁇ ', and pieces that
    are only a whitespace symbol at the start are consumed."""
    sp, tokenizer, _ = converted
    rng, n, space = random.Random(1), sp.get_piece_size(), sp.piece_to_id("\u2581")
    specials = [0, 1, 2, 3, space]
    for _ in range(2000):
        ids = [rng.choice(specials) for _ in range(rng.randint(0, 3))]
        ids += [rng.randrange(n) if rng.random() < 0.8 else rng.choice(specials) for _ in range(rng.randint(0, 6))]
        assert tokenizer.decode(ids, skip_special_tokens=True) == sp.decode(ids), ids


def test_what_is_not_converted_is_refused_by_name(converted, tmp_path):
    from sentencepiece import sentencepiece_model_pb2

    _, _, model = converted
    for change, words in [(lambda p: setattr(p.trainer_spec, "byte_fallback", True), "byte fallback"),
                          (lambda p: setattr(p.normalizer_spec, "name", "nmt_nfkc"), "normalization 'nmt_nfkc'"),
                          (lambda p: setattr(p.trainer_spec, "model_type", 3), "model type 3")]:
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(model.read_bytes())
        change(proto)
        (tmp_path / "changed.model").write_bytes(proto.SerializeToString())
        with pytest.raises(TfspecError, match=f"cannot write tokenizer.json for it: {words}"):
            tokenizer_json(tmp_path / "changed.model")
    (tmp_path / "junk.model").write_bytes(b"\xff" * 64)
    with pytest.raises(TfspecError, match="not a sentencepiece model"):
        tokenizer_json(tmp_path / "junk.model")


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    """A sentencepiece model of tiny's 1,000 pieces, trained on the sample (out of the tests:
    sentencepiece's training log needs a real file descriptor, which captured output has not)."""
    return train_tokenizer(sample_dir(), 1000, out_dir=tmp_path_factory.mktemp("tiny-spm"))


@pytest.fixture(scope="module")
def other_tokenizer(tmp_path_factory):
    return train_tokenizer(sample_dir(), 500, out_dir=tmp_path_factory.mktemp("other-spm"))


def test_export_ships_the_model_and_its_conversion(cli, tmp_path, tiny_tokenizer):
    """translate keeps reading tokenizer.model with sentencepiece (no `tokenizers` needed); the
    tokenizer.json beside it gives the same ids through tfspec's own HFCodec."""
    code, out, err = cli("export", "tiny", "-o", tmp_path / "m", "--tokenizer", tiny_tokenizer, "--no-check")
    assert code == 0, err
    assert "tokenizer: tokenizer.model, tokenizer.json" in out
    vocab = load_spec("tiny").vocab
    codec, converted = open_codec(tmp_path / "m", vocab), HFCodec(tmp_path / "m" / "tokenizer.json", vocab)
    assert isinstance(codec, SentencePieceCodec)
    for line in sample_lines("test")[:50]:
        ids = codec.encode(line)
        assert converted.encode(line) == ids and converted.decode(ids[:-1]) == codec.decode(ids[:-1])


def test_export_refuses_a_tokenizer_it_cannot_ship(cli, tmp_path, tiny_tokenizer, other_tokenizer):
    for args, words in [(["--tokenizer", tmp_path / "none.model"], "no such tokenizer model"),
                        (["--tokenizer", tiny_tokenizer, "--format", "hf"], "--tokenizer applies to --format onnx"),
                        (["--tokenizer", other_tokenizer], "has 500 pieces; tiny's vocabulary has 1,000")]:
        code, out, err = cli("export", "tiny", "-o", tmp_path / "m", *args)
        assert code == 2 and err.startswith("error: ") and words in err, err
        assert not (tmp_path / "m").exists()
