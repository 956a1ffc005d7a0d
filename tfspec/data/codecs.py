"""Text <-> token ids with the tokenizer a model directory holds, for ``tfspec translate``,
``tfspec generate`` and ``tfspec finetune``: tfspec's own sentencepiece model, or an imported
checkpoint's.

``open_codec(DIR, vocab)`` picks, in order: tfspec's own ``tokenizer.model`` (its special ids;
the ``tokenizer.json`` export writes beside it is a conversion for JavaScript clients),
``tokenizer.json`` (a Hugging Face fast tokenizer, through the ``tokenizers`` library, as
transformers' ``AutoTokenizer`` loads it), ``source.spm`` + ``target.spm`` + ``vocab.json``
(Marian: sentencepiece pieces mapped to ids by the JSON vocabulary, as transformers'
``MarianTokenizer`` does), then any other ``tokenizer.model``. A codec's ``encode`` gives a
line's ids as the model reads them (special tokens added), ``prompt`` a decoder-only model's
prompt, and ``decode`` the text of output ids with special tokens left out; ``encode_words``
reads a line split into words for ``tfspec finetune``'s token task. Tokenizer files are data:
JSON is checked, nothing executes.
"""

from __future__ import annotations

import functools
from pathlib import Path

from tfspec.errors import TfspecError
from tfspec.untrusted import read_json

TOKENIZER = "tokenizer.model"
"""tfspec's sentencepiece model next to exported graphs."""
HF_TOKENIZER = "tokenizer.json"
MARIAN_FILES = ("source.spm", "target.spm", "vocab.json")


def open_codec(directory: Path, vocab):
    """The codec of the tokenizer in ``directory`` (``vocab``: the spec's), or None without one.
    tfspec's own ``tokenizer.model`` (its special ids) comes first: the ``tokenizer.json`` that
    ``export`` writes beside it is its conversion for JavaScript (``tfspec.data.tokenizer_json``)."""
    from tfspec.data.tokenizer import is_tfspec_tokenizer

    if (directory / TOKENIZER).is_file() and is_tfspec_tokenizer(directory / TOKENIZER):
        return SentencePieceCodec(directory / TOKENIZER, vocab)
    if (directory / HF_TOKENIZER).is_file():
        return HFCodec(directory / HF_TOKENIZER, vocab)
    if all((directory / name).is_file() for name in MARIAN_FILES):
        return MarianCodec(directory, vocab)
    if (directory / TOKENIZER).is_file():
        return SentencePieceCodec(directory / TOKENIZER, vocab)
    return None


def shipped_codec(tokenizer: Path | None, home: Path | None, vocab):
    """The tokenizer an export ships, to read text with (``--shortlist``, ``--int4-calibrate``):
    ``tokenizer`` (``--tokenizer``; a training run's by default), else the spec directory
    ``home``'s own; None without one."""
    if tokenizer is not None:
        return SentencePieceCodec(Path(tokenizer), vocab)
    return open_codec(home, vocab) if home is not None else None


def encode_words(codec, words: list[str]) -> tuple[list[int], list[int]]:
    """A line already split into ``words``, as the model reads it, and the position of each
    word's first subword (where a token task reads the word's label: transformers' convention
    for ``is_split_into_words``). Each word is encoded alone, so its pieces do not depend on
    its neighbours; the special tokens ``encode`` adds are taken off every word and put once
    around the line (eos after it, or [CLS] before and [SEP] after)."""
    prefix, suffix = _frame(codec)
    ids, firsts = list(prefix), []
    for word in words:
        pieces = codec.encode(word)
        pieces = pieces[len(prefix):len(pieces) - len(suffix)]
        if not pieces:
            raise TfspecError(f"word {word!r} gives no tokens with this tokenizer")
        firsts.append(len(ids))
        ids += pieces
    return ids + suffix, firsts


@functools.cache  # a codec does not change: two probe encodes per codec, not per line
def _frame(codec) -> tuple[list[int], list[int]]:
    """The special tokens ``codec.encode`` puts before a text and after it: of the ids of an
    empty text, those a one-word text also starts with, and the rest."""
    empty, word = codec.encode(""), codec.encode("a")
    lead = 0
    while lead < len(empty) and empty[lead] == word[lead]:
        lead += 1
    return empty[:lead], empty[lead:]


def _sentencepiece(path: Path):
    import sentencepiece

    try:
        return sentencepiece.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as e:
        raise TfspecError(f"{path}: not a sentencepiece model ({str(e).strip().splitlines()[0][:120]})") from None


class SentencePieceCodec:
    """tfspec's own: sentencepiece ids, then eos."""

    def __init__(self, path: Path, vocab):
        self.sp, self.bos, self.eos = _sentencepiece(path), vocab.bos_id, vocab.eos_id

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text) + [self.eos]

    def prompt(self, text: str) -> list[int]:
        """A decoder-only model's prompt: bos, then the text (no eos: it continues)."""
        return [self.bos] + self.sp.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode(ids)


class MarianCodec:
    """transformers' MarianTokenizer: a leading ``>>lang<<`` code kept whole, the rest cut into
    pieces by the source sentencepiece model, pieces mapped to ids by vocab.json (unknown ones
    to <unk>), then eos; output ids mapped back to pieces and joined by the target model."""

    def __init__(self, directory: Path, vocab):
        if (directory / "target_vocab.json").is_file():
            raise TfspecError(f"{directory / 'target_vocab.json'}: separate source and target vocabularies are not "
                              "supported; tfspec imports Marian models with one vocabulary")
        self.source, self.target = (_sentencepiece(directory / n) for n in MARIAN_FILES[:2])
        self.ids = _vocabulary(directory / "vocab.json", vocab.size)
        self.pieces = {i: piece for piece, i in self.ids.items()}
        self.eos, self.unk = vocab.eos_id, self.ids["<unk>"]
        self.special = {vocab.eos_id, vocab.pad_id, self.unk}

    def encode(self, text: str) -> list[int]:
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[:end + 2]], text[end + 2:]
        pieces = code + self.source.encode(text, out_type=str)
        return [self.ids.get(piece, self.unk) for piece in pieces] + [self.eos]

    def decode(self, ids: list[int]) -> str:
        pieces = [self.pieces.get(i) or self.target.IdToPiece(i) for i in ids if i not in self.special]
        return self.target.decode_pieces(pieces).replace("\u2581", " ").strip()


def _vocabulary(path: Path, size: int) -> dict[str, int]:
    """vocab.json: piece -> id, every id an integer inside the model's vocabulary, <unk> present."""
    try:
        table = read_json(path)
    except (OSError, ValueError) as e:
        raise TfspecError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(table, dict) or not all(type(i) is int and 0 <= i < size for i in table.values()):
        raise TfspecError(f"{path}: expected an object mapping pieces to ids below the vocabulary size ({size})")
    if "<unk>" not in table:
        raise TfspecError(f"{path}: the vocabulary has no <unk> piece")
    return table


class HFCodec:
    """A Hugging Face fast tokenizer (``tokenizer.json``): its own special tokens added on
    encoding, as ``tokenizer(text)`` does, and skipped on decoding."""

    def __init__(self, path: Path, vocab):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise TfspecError(f"{path} needs the tokenizers library: pip install 'tfspec[hf]'") from None
        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as e:  # the Rust library raises its own exception type for malformed files
            raise TfspecError(f"{path}: not a tokenizer file tokenizers can read ({str(e).splitlines()[0][:120]})") \
                from None
        self.size = vocab.tgt_size

    def encode(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text).ids
        if any(i >= self.size for i in ids):
            raise TfspecError(f"the tokenizer gave id {max(ids)}, outside the model's vocabulary (0..{self.size - 1})")
        return ids

    prompt = encode  # what transformers' tokenizer(prompt) gives generate

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)
