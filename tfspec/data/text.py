"""Read the user's own parallel text: two line-aligned files, or one TSV file.

Plain files say nothing about documents, so consecutive lines are grouped into blocks that
stand in for them: neighbouring lines are often from one text, and holding out whole blocks
keeps them on one side of the split.
"""

from __future__ import annotations

from pathlib import Path

from tfspec.data.corpus import read_lines
from tfspec.errors import TfspecError

MAX_BLOCK = 100  # lines per block in large files; small files get smaller blocks (>= 100 blocks)


def block_size(count: int) -> int:
    return max(1, min(MAX_BLOCK, count // 100))


def line_blocks(name: str, count: int) -> list[str]:
    """A pseudo-document per block of consecutive lines: ``name:lines 1-100``, ..."""
    size = block_size(count)
    return [f"{name}:lines {i // size * size + 1}-{min(count, (i // size + 1) * size)}" for i in range(count)]


def read_parallel(src: Path, tgt: Path) -> tuple[list[tuple[str, str, str]], str]:
    """Pairs from two line-aligned files, and the split method to report."""
    a, b = read_lines(src), read_lines(tgt)
    if len(a) != len(b):
        raise TfspecError(f"{src} has {len(a)} lines but {tgt} has {len(b)}: the files must be aligned line by "
                          "line (one segment per line, the same number of lines)")
    method = f"line blocks of {block_size(len(a))} (the files carry no document names)"
    return list(zip(a, b, line_blocks(src.name, len(a)))), method


def read_tsv(path: Path) -> tuple[list[tuple[str, str, str]], str]:
    """Pairs from ``source<TAB>target`` or ``source<TAB>target<TAB>document`` lines."""
    rows = [(number, line.split("\t")) for number, line in enumerate(read_lines(path), 1) if line.strip()]
    width = len(rows[0][1]) if rows else 2
    for number, row in rows:
        if len(row) != width or width not in (2, 3):
            raise TfspecError(f"{path}:{number}: {len(row)} tab-separated column(s); every line needs 2 (source, "
                              "target) or every line 3 (source, target, document)")
    rows = [row for _, row in rows]
    if width == 3:
        return [(s, t, f"{path.name}:{d}") for s, t, d in rows], "document (the TSV's third column)"
    docs = line_blocks(path.name, len(rows))
    return [(s, t, d) for (s, t), d in zip(rows, docs)], f"line blocks of {block_size(len(rows))} (no document column)"
