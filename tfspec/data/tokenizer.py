"""One shared sentencepiece model for both languages of a corpus (the paper shares a BPE
vocabulary between source and target, section 5.1), saved beside the data.

The special ids are tfspec's (``tfspec.spec`` vocabulary defaults): pad 0, bos 1, eos 2, unk 3.
Training is deterministic: a fixed seed for sentencepiece's sampler and one thread.
"""

from __future__ import annotations

import os
from pathlib import Path

from tfspec.data.corpus import load_manifest, read_split
from tfspec.errors import TfspecError

SPECIAL = {"pad": 0, "bos": 1, "eos": 2, "unk": 3}
MODEL_TYPES = ("bpe", "unigram")
SEED = 0
SAMPLE = 2_000_000  # sentences sentencepiece reads at most (sampled with SEED beyond that)


def tokenizer_path(data_dir: str | Path, vocab_size: int, model_type: str = "bpe") -> Path:
    return Path(data_dir) / f"spm-{model_type}-{vocab_size}.model"


def train_tokenizer(data_dir: str | Path, vocab_size: int, model_type: str = "bpe", *,
                    out_dir: str | Path | None = None, force: bool = False) -> Path:
    """Train (or re-use) ``spm-<type>-<vocab>.model`` (+ ``.vocab``) on train.SRC + train.TGT of
    ``data_dir``, written into ``out_dir`` (default: ``data_dir``; another for a read-only corpus)."""
    import sentencepiece as spm

    if model_type not in MODEL_TYPES:
        raise TfspecError(f"tokenizer type {model_type!r}: expected one of {', '.join(MODEL_TYPES)}")
    if vocab_size <= len(SPECIAL):
        raise TfspecError(f"vocabulary size {vocab_size} leaves no room beside the {len(SPECIAL)} special tokens")
    data_dir = Path(data_dir)
    manifest = load_manifest(data_dir)
    path = tokenizer_path(out_dir or data_dir, vocab_size, model_type)
    if not force and _reusable(path, data_dir, vocab_size):
        return path
    lines = [side for pair in read_split(data_dir, "train", manifest["src"], manifest["tgt"]) for side in pair]
    prefix = path.with_name(f".{path.stem}.{os.getpid()}.tmp")  # torchrun's ranks may train it at once
    spm.set_random_generator_seed(SEED)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(os.devnull, "w") as quiet:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(lines), model_prefix=str(prefix), model_type=model_type,
                vocab_size=vocab_size, character_coverage=1.0,  # en/de: a few hundred characters, keep them all
                # identity: NFKC would rewrite characters (… -> ..., ² -> 2) that the references keep,
                # and decoded output is scored against those references as they are
                normalization_rule_name="identity",
                pad_id=SPECIAL["pad"], bos_id=SPECIAL["bos"], eos_id=SPECIAL["eos"], unk_id=SPECIAL["unk"],
                input_sentence_size=SAMPLE, shuffle_input_sentence=True, num_threads=1, logstream=quiet)
    except RuntimeError as e:
        raise TfspecError(f"sentencepiece could not train a {vocab_size}-piece {model_type} model on {data_dir}: "
                          f"{str(e).strip()}") from None
    except OSError as e:
        raise TfspecError(f"cannot write the tokenizer into {path.parent}: {e.strerror or e}") from None
    for suffix in (".vocab", ".model"):  # the model last: its presence means both are complete
        os.replace(f"{prefix}{suffix}", path.with_suffix(suffix))
    return path


def _reusable(path: Path, data_dir: Path, vocab_size: int) -> bool:
    """A model already there, newer than the corpus, of the right size with tfspec's special ids."""
    try:
        if path.stat().st_mtime_ns < (data_dir / "manifest.json").stat().st_mtime_ns:
            return False
        return load_tokenizer(path).get_piece_size() == vocab_size
    except (OSError, TfspecError):
        return False


def load_tokenizer(path: str | Path):
    """A ``sentencepiece.SentencePieceProcessor``, refused unless it uses tfspec's special ids."""
    import sentencepiece as spm

    path = Path(path)
    if not path.is_file():
        raise TfspecError(f"{path}: no such tokenizer model (train one with `tfspec data tokenize DIR --vocab N`)")
    processor = spm.SentencePieceProcessor()
    try:
        processor.load(str(path))
    except (OSError, RuntimeError) as e:
        raise TfspecError(f"{path}: not a sentencepiece model ({str(e).strip()})") from None
    ids = {"pad": processor.pad_id(), "bos": processor.bos_id(), "eos": processor.eos_id(), "unk": processor.unk_id()}
    if ids != SPECIAL:
        raise TfspecError(f"{path}: special ids {ids} differ from tfspec's {SPECIAL}; retrain it with "
                          "`tfspec data tokenize`")
    return processor


def is_tfspec_tokenizer(path: str | Path) -> bool:
    """Whether ``path`` is a sentencepiece model that ``load_tokenizer`` takes (tfspec's special ids)."""
    try:
        return load_tokenizer(path) is not None
    except TfspecError:
        return False
