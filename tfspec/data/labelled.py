"""Labelled text for fine-tuning: ``{train,dev,test}.txt`` (one text per line, UTF-8) and
``{train,dev,test}.labels`` (its label, aligned line by line), as ``tfspec data langid``
writes them. The label set is train's; a held-out label outside it is refused by line."""

from __future__ import annotations

from pathlib import Path

from tfspec.data.corpus import SPLITS, read_lines
from tfspec.errors import TfspecError


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


def label_ids(labels: list[str], names: list[str], where: Path) -> list[int]:
    """Each label's index in ``names``; a label outside them is refused with its line."""
    index = {name: i for i, name in enumerate(names)}
    for number, label in enumerate(labels, 1):
        if label not in index:
            raise TfspecError(f"{where}:{number}: label {label!r} is not among the {len(names)} labels train "
                              f"has ({', '.join(names[:20])}{', ...' if len(names) > 20 else ''})")
    return [index[label] for label in labels]
