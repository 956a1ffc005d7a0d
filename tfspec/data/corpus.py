"""A prepared corpus on disk: the split held out by document, the files, the manifest, the checks.

Layout of ``DIR`` (what ``tfspec train --data DIR`` reads):

    {train,dev,test}.{SRC,TGT}   one segment per line, UTF-8, aligned line by line
    {train,dev,test}.docs        the document each line came from (``source:path``)
    manifest.json                pair, counts, sources, sha256 and size of every file
    README.md                    sources, licences, counts and the command that made it

Dev and test are whole documents (help pages, chapters, blocks of lines): help texts repeat
their phrasings, so a random split of lines would put near-copies of test sentences into
train. A pair whose source sentence also occurs in a held-out split is removed from the splits
before it (train, then dev), so no test source is ever seen in training.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections import Counter
from pathlib import Path

from tfspec import __version__
from tfspec.errors import TfspecError
from tfspec.untrusted import file_name, read_json

FORMAT, VERSION = "tfspec-corpus", 1
SPLITS = ("train", "dev", "test")
HELD_OUT = 2500  # pairs per held-out split: enough for a stable BLEU, small beside the ~50k of train


def held_out_size(pairs: int) -> int:
    """Pairs for dev and for test each: HELD_OUT, or a twentieth of a small corpus."""
    return min(HELD_OUT, max(1, pairs // 20))


def _rank(doc: str) -> str:
    return hashlib.sha256(doc.encode("utf-8")).hexdigest()


def split_by_document(pairs: list[tuple[str, str, str]], held_out: int) -> tuple[dict[str, list], int]:
    """Assign whole documents to test, then dev (in sha256 order of their names, so the choice
    depends on nothing but the names) until each has ``held_out`` pairs; the rest is train.

    Returns the splits (pairs in their original order) and how many pairs were removed because
    their source sentence occurs in a later held-out split.
    """
    sizes = Counter(doc for _, _, doc in pairs)
    if len(sizes) < 3:
        raise TfspecError(f"{len(pairs)} pairs in {len(sizes)} document(s): a split into train, dev and test "
                          "needs at least three documents (or line blocks)")
    assigned, filled = {}, Counter()
    ranked = sorted(sizes, key=_rank)
    for i, doc in enumerate(ranked):
        if i < 2:  # test and dev get a document each, however large
            split = ("test", "dev")[i]
        elif i == len(ranked) - 1 and not filled["train"]:
            split = "train"
        else:
            split = next((s for s in ("test", "dev") if filled[s] < held_out), "train")
        assigned[doc] = split
        filled[split] += sizes[doc]
    splits: dict[str, list] = {s: [] for s in SPLITS}
    for pair in pairs:
        splits[assigned[pair[2]]].append(pair)
    removed, held = 0, set()
    for split in ("test", "dev", "train"):
        keep = [p for p in splits[split] if p[0] not in held]
        removed += len(splits[split]) - len(keep)
        splits[split] = keep
        held.update(p[0] for p in keep)
    empty = [s for s in SPLITS if not splits[s]]
    if empty:
        raise TfspecError(f"{len(pairs)} pairs are too few to fill every split ({', '.join(empty)} would be empty)")
    return splits, removed


def write(data_dir: Path, splits: dict[str, list], manifest: dict, readme: str,
          columns: tuple[str, str, str] | None = None) -> dict:
    """Write the split files, then README.md, then manifest.json (last: it marks a complete corpus).
    Each split's items are 3-tuples written to ``SPLIT.<column>`` files: by default the manifest's
    source and target suffixes and ``docs``."""
    columns = columns or (manifest["src"], manifest["tgt"], "docs")
    files = {}
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "manifest.json").unlink(missing_ok=True)
        for split in SPLITS:
            for column, suffix in enumerate(columns):
                name = f"{split}.{suffix}"
                files[name] = write_lines(data_dir / name, [p[column] for p in splits[split]])
        manifest = {**manifest, "files": files}
        _atomic(data_dir / "README.md", readme.encode("utf-8"))
        _atomic(data_dir / "manifest.json", (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode())
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise TfspecError(f"disk full while writing the corpus into {data_dir}") from None
        raise TfspecError(f"cannot write the corpus into {data_dir}: {e}") from None
    return manifest


def write_lines(path: Path, lines: list[str]) -> dict:
    """Write ``lines`` atomically; their sha256, bytes and line count, as the manifest records them."""
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    _atomic(path, data)
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "lines": len(lines)}


def _atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def load_manifest(data_dir: str | Path) -> dict:
    """The corpus manifest; a clear error when it is missing, unreadable or of another format."""
    path = Path(data_dir) / "manifest.json"
    try:
        manifest = read_json(path)
    except FileNotFoundError:
        raise TfspecError(f"{path}: no such file: {data_dir} is not a prepared corpus (make one with `tfspec "
                          "data fetch` or `tfspec data prepare`)") from None
    except (OSError, ValueError) as e:
        raise TfspecError(f"{path}: unreadable manifest ({e}); rebuild the corpus with --force") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise TfspecError(f"{path}: not a {FORMAT} manifest of version {VERSION}; rebuild the corpus with --force")
    if not (file_name(manifest.get("src")) and file_name(manifest.get("tgt"))  # language codes: file suffixes
            and isinstance(manifest.get("files"), dict) and isinstance(manifest.get("splits", {}), dict)):
        raise TfspecError(f"{path}: corrupt manifest ('src' and 'tgt' must be language codes, 'files' and 'splits' "
                          "mappings); rebuild the corpus with --force")
    return manifest


def current(data_dir: Path, request: dict) -> dict | None:
    """The manifest if ``data_dir`` already holds the corpus ``request`` asks for, unchanged since it
    was written (size and modification time of every file: instant, unlike hashing), else None."""
    try:
        manifest = load_manifest(data_dir)
        stamp = (data_dir / "manifest.json").stat().st_mtime_ns
        for name, meta in manifest["files"].items():
            st = (data_dir / name).stat()
            if st.st_size != meta["bytes"] or st.st_mtime_ns > stamp:
                return None
    except (TfspecError, OSError, KeyError, TypeError):
        return None
    return manifest if manifest.get("request") == request else None


def verify(data_dir: str | Path) -> list[str]:
    """Problems found by hashing every file against the manifest (empty: all files intact)."""
    data_dir = Path(data_dir)
    problems = []
    for name, meta in load_manifest(data_dir)["files"].items():
        try:
            digest = hashlib.sha256((data_dir / name).read_bytes()).hexdigest()
        except OSError as e:
            problems.append(f"{data_dir / name}: {e.strerror or e}")
            continue
        if digest != meta["sha256"]:
            problems.append(f"{data_dir / name}: sha256 differs from manifest.json (the file changed)")
    return problems


def read_split(data_dir: str | Path, split: str, src: str = "en", tgt: str = "de") -> list[tuple[str, str]]:
    """The ``(source, target)`` pairs of one split, checked: both files present, UTF-8, equally long."""
    data_dir = Path(data_dir)
    if split not in SPLITS:
        raise TfspecError(f"unknown split {split!r}: expected one of {', '.join(SPLITS)}")
    sides = [read_lines(data_dir / f"{split}.{lang}") for lang in (src, tgt)]
    if len(sides[0]) != len(sides[1]):
        raise TfspecError(f"{data_dir}: {split}.{src} has {len(sides[0])} lines but {split}.{tgt} has "
                          f"{len(sides[1])}: the files must be aligned line by line")
    for number, (a, b) in enumerate(zip(*sides), 1):
        if not a.strip() or not b.strip():
            side = src if not a.strip() else tgt
            raise TfspecError(f"{data_dir / f'{split}.{side}'}:{number}: empty line (every line must be a segment)")
    return list(zip(*sides))


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (a byte-order mark is allowed), or a one-line reason why not."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        hint = " (the corpus has no such language)" if path.parent.joinpath("manifest.json").exists() else ""
        raise TfspecError(f"{path}: no such file{hint}") from None
    except OSError as e:
        raise TfspecError(f"{path}: cannot read it ({e.strerror or e})") from None
    try:
        return data.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise TfspecError(f"{path}:{line}: not UTF-8 (byte {data[e.start]:#04x} at offset {e.start}); convert "
                          "it, e.g. with `iconv -f latin1 -t utf-8`") from None


def base_manifest(request: dict, src: str, tgt: str, splits: dict[str, list], extra: dict) -> dict:
    return {"format": FORMAT, "version": VERSION, "created_by": f"tfspec {__version__}", "pair": f"{src}-{tgt}",
            "src": src, "tgt": tgt, "request": request,
            "splits": {s: {"pairs": len(splits[s]), "documents": len({p[2] for p in splits[s]})} for s in SPLITS},
            **extra}
