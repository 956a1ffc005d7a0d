"""A Hugging Face checkpoint directory as transformers' ``save_pretrained`` writes it.

``config.json``; weights as ``model.safetensors``, shards named by ``model.safetensors.index.json``,
or the same two forms of ``pytorch_model.bin`` (safetensors win when both exist, as in
transformers); tokenizer files beside them. Every tensor's name, shape and dtype is known
before any data is read, so a bad checkpoint is refused before anything is written.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tfspec.errors import TfspecError
from tfspec.untrusted import file_name, read_json

from tfspec.tensors import Entry, read_header, read_pickled, read_tensor

CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
PREPROCESSOR_CONFIG = "preprocessor_config.json"
KEPT = (GENERATION_CONFIG, PREPROCESSOR_CONFIG)
"""The checkpoint's JSON that is neither weights nor tokenizer: its generation defaults (forced
end ids, beams, lengths) and its image processor's settings, kept beside an import so that
exports hand them on (``export --format optimum``: pipelines read them)."""
WEIGHT_FILES = (("model.safetensors", "model.safetensors.index.json"),
                ("pytorch_model.bin", "pytorch_model.bin.index.json"))
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "merges.txt", "vocab.json",
                   "special_tokens_map.json", "added_tokens.json", "chat_template.jinja")
"""Copied along with any sentencepiece ``*.model`` and ``*.spm`` (Marian's source.spm and
target.spm): ``tfspec translate`` and ``generate`` read some (``tfspec.data.codecs``), ``tfspec
serve`` the chat template (transformers >= 4.43 saves it as chat_template.jinja), users others."""


def tokenizer_files(directory: Path) -> list[Path]:
    """The tokenizer files in ``directory``."""
    found = [directory / n for n in TOKENIZER_FILES] + sorted(directory.glob("*.model"))
    found += sorted(directory.glob("*.spm"))
    return [p for p in found if p.is_file()]


@dataclass
class Checkpoint:
    directory: Path
    config: dict
    files: list[Path] = field(default_factory=list)
    """Weight files, empty for a configuration alone."""
    tensors: dict[str, Entry | np.ndarray] = field(default_factory=dict)
    """Tensor name -> where it is (safetensors) or its value (pickled files, read whole), or a
    quantized tensor's parts (``mxfp4.Packed``, ``fp8.Scaled``: ``quantized.dequantized``)."""
    origin: dict[str, Path] = field(default_factory=dict)
    """Tensor name -> the file holding it."""

    @property
    def has_weights(self) -> bool:
        return bool(self.files)

    def shape(self, name: str) -> tuple[int, ...]:
        t = self.tensors[name]
        return t.shape if isinstance(t, Entry) else tuple(t.shape)

    def read(self, name: str) -> np.ndarray:
        t = self.tensors[name]
        if isinstance(t, np.ndarray):
            return t
        return read_tensor(t) if isinstance(t, Entry) else t.read()  # else quantized, read dequantized

    def where(self, name: str) -> str:
        return str(self.origin.get(name, self.directory))

    def tokenizer_files(self) -> list[Path]:
        return tokenizer_files(self.directory)


def open_checkpoint(directory: str | Path) -> Checkpoint:
    directory = Path(directory)
    if not directory.is_dir():
        raise TfspecError(f"{directory}: no such checkpoint directory")
    checkpoint = Checkpoint(directory, read_config(directory / CONFIG))
    for single, index in WEIGHT_FILES:
        if _present(directory / index):
            checkpoint.files = _shards(directory / index)
        elif _present(directory / single):
            checkpoint.files = [directory / single]
        else:
            continue
        for path in checkpoint.files:
            tensors = _read_tensors(path)
            for name in tensors.keys() & checkpoint.tensors.keys():
                raise TfspecError(f"{path}: tensor {name!r} is also in {checkpoint.origin[name].name}")
            checkpoint.tensors |= tensors
            checkpoint.origin |= dict.fromkeys(tensors, path)
        if (directory / index).is_file():
            _check_index(directory / index, checkpoint)
        break
    return checkpoint


def _present(path: Path) -> bool:
    """Whether the weights file ``path`` is there: False where nothing has its name, an error where
    something has it but is no file to read (a directory, a dangling link, a loop of links): a
    checkpoint whose weights cannot be read must not import as a configuration alone."""
    if not os.path.lexists(path):
        return False
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise TfspecError(f"{path}: not a readable weights file ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise TfspecError(f"{path}: not a readable weights file ({kind})")
    return True


def _read_tensors(path: Path) -> dict:
    """The tensors of one weights file (safetensors entries, or a pickle's arrays)."""
    try:
        return read_header(path)[0] if path.suffix == ".safetensors" else read_pickled(path)
    except OSError as e:  # permissions, or a file gone since it was found
        raise TfspecError(f"{path}: not a readable weights file ({e.strerror or e})") from None


def read_config(path: Path) -> dict:
    if not path.exists():
        raise TfspecError(f"{path}: no such file; a Hugging Face checkpoint directory holds config.json")
    try:
        config = read_json(path)
    except (OSError, ValueError) as e:
        raise TfspecError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(config, dict):
        raise TfspecError(f"{path}: expected a JSON object of configuration fields")
    return config


def _read_index(path: Path) -> dict[str, str]:
    """The index's tensor -> shard file map; shard names must be plain file names."""
    try:
        weight_map = read_json(path)["weight_map"]
        ok = isinstance(weight_map, dict) and all(isinstance(v, str) for v in weight_map.values())
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TfspecError(f"{path}: not a readable shard index ({type(e).__name__}: {e})") from None
    if not ok:
        raise TfspecError(f"{path}: weight_map must map tensor names to shard file names")
    for shard in set(weight_map.values()):
        if not file_name(shard):
            raise TfspecError(f"{path}: shard {shard!r} is not a file name in this directory")
    return weight_map


def _shards(index: Path) -> list[Path]:
    files = [index.parent / name for name in sorted(set(_read_index(index).values()))]
    for path in files:
        if not _present(path):
            raise TfspecError(f"{path}: missing shard named in {index.name}")
    return files


def _check_index(index: Path, checkpoint: Checkpoint) -> None:
    """Each tensor the index names is in the shard it names."""
    for name, shard in _read_index(index).items():
        if checkpoint.origin.get(name, index).name != shard:
            raise TfspecError(f"{index.parent / shard}: tensor {name!r}, named in {index.name}, is not in it")


def read_vocabulary(directory: Path) -> dict[str, int]:
    """Token -> id from WordPiece ``vocab.txt`` (one token a line) or BPE ``vocab.json``; {} if
    neither is readable. Only used to find special tokens, so an unreadable file is not an error."""
    try:
        if (directory / "vocab.txt").is_file():
            lines = (directory / "vocab.txt").read_text(encoding="utf-8").splitlines()
            return {token: i for i, token in reversed(list(enumerate(lines)))}
        if (directory / "vocab.json").is_file():
            vocab = read_json(directory / "vocab.json")
            return {k: v for k, v in vocab.items() if isinstance(v, int)} if isinstance(vocab, dict) else {}
    except (OSError, ValueError):
        pass
    return {}


def check_writable(output: Path) -> None:
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise TfspecError(f"{output}: exists and is not an empty directory; remove it or choose another")


@contextmanager
def staged_directory(output: Path):
    """A temporary directory beside ``output`` that becomes ``output`` only if the block
    completes: an error or interruption leaves no half-written directory."""
    check_writable(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}-", dir=output.parent))
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)  # mkdtemp's 0700 would outlive the rename
    try:
        yield staging
        if output.exists():
            output.rmdir()
        os.replace(staging, output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
