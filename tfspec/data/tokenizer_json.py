"""tokenizer.json (the Hugging Face ``tokenizers`` format) written from tfspec's sentencepiece
model, so that JavaScript (``@huggingface/tokenizers``), Rust or Python's ``tokenizers`` cut a
line into the ids ``tfspec translate`` gives it and join output ids into the text it prints,
without sentencepiece.

The pieces mirror transformers' ``SpmConverter.build_tokenizer_from_spm_proto`` (legacy mode):
BPE merges ranked by the merged piece's score, or the unigram pieces with their scores. Three
things differ, each to match sentencepiece 0.2 (``normalizer.cc``, ``Decode`` in
``sentencepiece_processor.cc``) where the converter does not:

- trailing whitespace symbols are removed after escaping, literal U+2581 too, as sentencepiece does;
- the control and unknown pieces (<pad>, <s>, </s>, <unk>) keep their ids but are renamed with
  a space, which normalised text never holds: a line with "</s>" in it is text, not end of
  sentence, and a unigram lattice never takes them;
- decoding drops the control pieces, writes <unk> as sentencepiece's `` ⁇ ``, and removes every
  leading U+2581 (sentencepiece consumes one per piece until the text is not empty).

End of sentence is appended by the post-processor (``SentencePieceCodec.encode``). Only what
``tfspec data tokenize`` trains is converted (BPE or unigram, identity normalisation, default
whitespace options, no byte fallback, no user-defined pieces); anything else is refused by name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tfspec.errors import TfspecError

SPACE = "\u2581"  # sentencepiece's whitespace symbol
NORMAL, UNKNOWN, CONTROL = 1, 2, 3  # ModelProto.SentencePiece.Type
MODEL_TYPES = {1: "Unigram", 2: "BPE"}  # TrainerSpec.ModelType


def write_tokenizer_json(model: Path, output: Path) -> Path:
    """Write the conversion of sentencepiece ``model`` to ``output`` (atomically)."""
    text = json.dumps(tokenizer_json(model), ensure_ascii=False, indent=1)
    partial = output.with_name(f".{output.name}.tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, output)
    return output


def tokenizer_json(model: Path) -> dict:
    """The ``tokenizers`` JSON of sentencepiece ``model``: ids and text as sentencepiece's."""
    proto = _read(model)
    pieces = [_name(p) for p in proto.pieces]
    eos = proto.trainer_spec.eos_id
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": _normalizer(),
        "pre_tokenizer": {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": False},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": pieces[eos], "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}},
                     {"SpecialToken": {"id": pieces[eos], "type_id": 0}}],
            "special_tokens": {pieces[eos]: {"id": pieces[eos], "ids": [eos], "tokens": [pieces[eos]]}},
        },
        "decoder": _decoder(proto, pieces),
        "model": _model(proto, pieces),
    }


def _read(path: Path):
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(Path(path).read_bytes())
    except OSError as e:
        raise TfspecError(f"{path}: cannot read it ({e.strerror or e})") from None
    except Exception as e:  # protobuf's DecodeError: not a model
        raise TfspecError(f"{path}: not a sentencepiece model ({e})") from None
    _check(path, proto)
    return proto


def _check(path: Path, proto) -> None:
    """Refuse, by name, what the conversion does not reproduce exactly."""
    spec, norm = proto.trainer_spec, proto.normalizer_spec
    problems = []
    if spec.model_type not in MODEL_TYPES:
        problems.append(f"model type {spec.model_type} (BPE and unigram are converted)")
    if norm.precompiled_charsmap or norm.name not in ("identity", ""):
        problems.append(f"normalization {norm.name!r} (identity is converted, as tfspec data tokenize trains)")
    if not (norm.add_dummy_prefix and norm.remove_extra_whitespaces and norm.escape_whitespaces) \
            or spec.treat_whitespace_as_suffix:
        problems.append("non-default whitespace options")
    if spec.byte_fallback:
        problems.append("byte fallback")
    if any(p.type not in (NORMAL, UNKNOWN, CONTROL) for p in proto.pieces):
        problems.append("user-defined or byte pieces")
    if any(SPACE * 2 in p.piece for p in proto.pieces):
        problems.append(f"pieces holding {SPACE * 2!r} (sentencepiece decodes them differently at the start)")
    if not 0 <= spec.eos_id < len(proto.pieces) or proto.pieces[spec.unk_id].type != UNKNOWN:
        problems.append("no end-of-sentence or unknown piece")
    if problems:
        raise TfspecError(f"{path}: cannot write tokenizer.json for it: {'; '.join(problems)}")


def _name(piece) -> str:
    """A control or unknown piece's name with a space around it: normalised text never holds one."""
    return f" {piece.piece} " if piece.type in (CONTROL, UNKNOWN) else piece.piece


def _model(proto, pieces: list[str]) -> dict:
    unk = proto.trainer_spec.unk_id
    if MODEL_TYPES[proto.trainer_spec.model_type] == "Unigram":
        return {"type": "Unigram", "unk_id": unk, "byte_fallback": False,
                "vocab": [[name, p.score] for name, p in zip(pieces, proto.pieces)]}
    return {"type": "BPE", "dropout": None, "unk_token": pieces[unk], "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": False, "ignore_merges": False,
            "vocab": {name: i for i, name in enumerate(pieces)}, "merges": _merges(proto)}


def _merges(proto) -> list[list[str]]:
    """Every split of a normal piece into two normal pieces, the merged piece's score first (as
    sentencepiece's BPE merges the best-scored pair), then its id (the converter's order)."""
    normal = {p.piece: (p.score, i) for i, p in enumerate(proto.pieces) if p.type == NORMAL}
    ranked = sorted((-score, i, piece[:cut], piece[cut:]) for piece, (score, i) in normal.items()
                    for cut in range(1, len(piece)) if piece[:cut] in normal and piece[cut:] in normal)
    return [[left, right] for _, _, left, right in ranked]


def _normalizer() -> dict:
    """sentencepiece's ``Normalizer::Normalize`` without a character map: leading spaces dropped,
    runs of spaces made one, spaces escaped, trailing whitespace symbols dropped; the dummy
    prefix (Metaspace) is doubled where the text starts with a literal U+2581, which Metaspace
    would otherwise take for one."""
    return {"type": "Sequence", "normalizers": [
        _replace({"Regex": r"\A +"}, ""), _replace({"Regex": " {2,}"}, " "), _replace({"String": " "}, SPACE),
        _replace({"Regex": rf"{SPACE}+\z"}, ""), _replace({"Regex": rf"\A{SPACE}"}, SPACE * 2)]}


def _decoder(proto, pieces: list[str]) -> dict:
    """sentencepiece's ``Decode``: control pieces invisible, <unk> as its surface, leading
    whitespace symbols consumed (each piece loses one until the text is not empty: with no piece
    holding two, that is every leading one), the others spaces."""
    controls = "|".join(_escape(name) for name, p in zip(pieces, proto.pieces) if p.type == CONTROL)
    unk = pieces[proto.trainer_spec.unk_id]
    return {"type": "Sequence", "decoders": [
        _replace({"Regex": rf"\A(?:{controls})\z"}, ""),
        _replace({"Regex": rf"\A{_escape(unk)}\z"}, proto.trainer_spec.unk_surface),
        {"type": "Fuse"}, _replace({"Regex": rf"\A{SPACE}+"}, ""), _replace({"String": SPACE}, " ")]}


def _replace(pattern: dict, content: str) -> dict:
    return {"type": "Replace", "pattern": pattern, "content": content}


def _escape(text: str) -> str:
    """``text`` as a literal in an Oniguruma (and JavaScript) pattern."""
    return "".join(f"\\{c}" if c in r"\^$.|?*+()[]{}/" else c for c in text)
