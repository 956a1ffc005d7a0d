"""Labelled text for fine-tuning: ``{train,dev,test}.txt`` (one text per line, UTF-8) and
``{train,dev,test}.labels`` aligned with it line by line, as ``tfspec data langid`` and
``tfspec data code-switch`` write them. Two tasks read them:

* ``sequence``: a line's label is one word, the class of the whole text;
* ``tokens``: a text is whitespace-separated words and its labels line one label per word,
  whitespace-separated (a Hugging Face dataset's ``tokens`` and ``tags`` columns).

The manifest says which (``"task": "tokens"``; none: ``sequence``). The label set is train's;
a held-out label outside it is refused by line.
"""

from __future__ import annotations

from pathlib import Path

from tfspec.data import corpus
from tfspec.data.corpus import SPLITS, read_lines
from tfspec.errors import TfspecError

TASKS = ("sequence", "tokens")


def task_of(data_dir: str | Path) -> str:
    """The task DATA's manifest.json names, else ``sequence`` (a directory written by hand)."""
    path = Path(data_dir) / "manifest.json"
    if not path.is_file():
        return "sequence"
    task = corpus.load_manifest(data_dir).get("task", "sequence")
    if task not in TASKS:
        raise TfspecError(f"{path}: task {task!r}: expected one of {', '.join(TASKS)}")
    return task


def read_labelled(data_dir: str | Path, split: str) -> tuple[list[str], list[str]]:
    """(texts, labels) of one split, checked: both files present, equally long, nothing empty."""
    data_dir = Path(data_dir)
    if split not in SPLITS:
        raise TfspecError(f"unknown split {split!r}: expected one of {', '.join(SPLITS)}")
    texts, labels = read_lines(data_dir / f"{split}.txt"), read_lines(data_dir / f"{split}.labels")
    if len(texts) != len(labels):
        raise TfspecError(f"{data_dir}: {split}.txt has {len(texts):,} lines but {split}.labels has {len(labels):,}: "
                          "every text needs its label on the same line")
    for number, (text, label) in enumerate(zip(texts, labels), 1):
        if not text.strip():
            raise TfspecError(f"{data_dir / f'{split}.txt'}:{number}: empty line (every line must be a text)")
        if not label.strip():
            raise TfspecError(f"{data_dir / f'{split}.labels'}:{number}: missing label")
    if not texts:
        raise TfspecError(f"{data_dir / f'{split}.txt'}: no texts")
    return texts, [label.strip() for label in labels]


def read_tagged(data_dir: str | Path, split: str) -> tuple[list[list[str]], list[list[str]]]:
    """(words, labels) of one split of a token task: the checks of ``read_labelled``, then as
    many labels as words on every line."""
    texts, labels = read_labelled(data_dir, split)
    words, tags = [text.split() for text in texts], [label.split() for label in labels]
    for number, (line, line_tags) in enumerate(zip(words, tags), 1):
        if len(line) != len(line_tags):
            raise TfspecError(f"{Path(data_dir) / f'{split}.labels'}:{number}: {_count(len(line_tags), 'label')} "
                              f"for the {_count(len(line), 'word')} of {split}.txt:{number} (one label per word)")
    return words, tags


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def label_ids(labels: list, names: list[str], where: Path) -> list:
    """Each label's index in ``names`` (a line of a token task's labels: a list of indices); a
    label outside them is refused with its line."""
    index = {name: i for i, name in enumerate(names)}
    for number, line in enumerate(labels, 1):
        for label in [line] if isinstance(line, str) else line:
            if label not in index:
                raise TfspecError(f"{where}:{number}: label {label!r} is not among the {len(names)} labels train "
                                  f"has ({', '.join(names[:20])}{', ...' if len(names) > 20 else ''})")
    return [index[line] if isinstance(line, str) else [index[label] for label in line] for line in labels]


def write_labelled(out: Path, splits: dict[str, list[tuple[str, str, str]]], request: dict, extra: dict,
                   readme) -> dict:
    """Write (text, labels, document) items as ``{split}.txt``, ``.labels`` and ``.docs``, then
    ``readme(manifest)`` as README.md, then manifest.json (``corpus.write``). The manifest is a
    corpus's whose two sides are both ``txt``, so ``tfspec train --src txt --tgt txt`` pretrains
    on the texts and a tokenizer trained on DATA reads them."""
    pairs = {s: [(text, text, doc) for text, _, doc in items] for s, items in splits.items()}
    manifest = corpus.base_manifest(request, "txt", "txt", pairs, extra)
    return corpus.write(out, splits, manifest, readme(manifest), columns=("txt", "labels", "docs"))
