"""``tfspec data``: fetch, prepare, sample, tokenize and describe parallel corpora (``tfspec.data``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tfspec.cli import ctc, images
from tfspec.cli.tables import render
from tfspec.cli.types import POSITIVE, SEED, integer
from tfspec.data import (SOURCES, SPLITS, fetch_corpus, load_manifest, make_sample, prepare_corpus, read_split,
                         train_tokenizer, verify)
from tfspec.errors import TfspecError
from tfspec.spec.bounds import MAX_VOCAB

LAYOUT = """\
A corpus directory holds {train,dev,test}.{SRC,TGT} (one segment per line, UTF-8, aligned line
by line), {train,dev,test}.docs (the document of each line), manifest.json and README.md.
Dev and test are whole documents (help pages, or blocks of lines), never random lines.
"""
EXAMPLES = """\
examples:
  tfspec data fetch --pair en-de corpus/en-de        # ~54k pairs from Debian's documentation
  tfspec data stats corpus/en-de                     # counts and the copy-the-source BLEU floor
  tfspec data tokenize corpus/en-de --vocab 8000     # corpus/en-de/spm-bpe-8000.model
  tfspec data prepare --src my.en --tgt my.de corpus/mine
"""


def _summary(manifest: dict, data_dir: str, started: float, cached: bool) -> None:
    how = "cached: nothing to do" if cached else f"written in {time.perf_counter() - started:.1f}s"
    rows = [[name, *(f"{info['pairs'][s]:,}" for s in SPLITS), info["licence"]]
            for name, info in manifest["sources"].items()]
    rows.append(["total", *(f"{manifest['splits'][s]['pairs']:,}" for s in SPLITS), ""])
    print(f"{manifest['pair']} corpus in {data_dir} ({how}); split by {manifest['split']}")
    print(render(["source", *SPLITS, "licence"], rows), end="")
    for name, info in manifest["sources"].items():
        if not sum(info["pairs"].values()):
            print(f"warning: {name} gave no pairs for {manifest['pair']}", file=sys.stderr)


def _stamp(data_dir: str) -> int | None:
    try:
        return (Path(data_dir) / "manifest.json").stat().st_mtime_ns
    except OSError:
        return None


def cmd_fetch(args) -> int:
    sources = [s.strip() for s in args.sources.split(",") if s.strip()] if args.sources else None
    before, started = _stamp(args.dir), time.perf_counter()
    if not before or args.force:
        print(f"fetching Debian packages into {Path(args.dir) / '.cache'} (apt-get download, dpkg -x) ...",
              file=sys.stderr)
    manifest = fetch_corpus(args.dir, args.pair, sources, held_out=args.held_out, force=args.force,
                            progress=sys.stderr.isatty())
    _summary(manifest, args.dir, started, before is not None and before == _stamp(args.dir))
    return 0


def cmd_prepare(args) -> int:
    before, started = _stamp(args.dir), time.perf_counter()
    manifest = prepare_corpus(args.dir, src_file=args.src, tgt_file=args.tgt, tsv=args.tsv, pair=args.pair,
                              held_out=args.held_out, force=args.force)
    _summary(manifest, args.dir, started, before is not None and before == _stamp(args.dir))
    dropped = manifest["cleaning"]["dropped"]
    if dropped:
        print("dropped by cleaning: " + ", ".join(f"{k} {v:,}" for k, v in dropped.items()))
    return 0


def cmd_sample(args) -> int:
    try:
        sizes = tuple(int(n) for n in args.sizes.split(","))
    except ValueError:
        sizes = ()
    if len(sizes) != 3 or min(sizes) < 1:
        raise TfspecError(f"--sizes {args.sizes!r}: expected three positive counts TRAIN,DEV,TEST, e.g. 2000,200,200")
    started = time.perf_counter()
    manifest = make_sample(args.corpus, args.dir, sizes=sizes, source=args.source, max_words=args.max_words)
    _summary(manifest, args.dir, started, False)
    return 0


def cmd_tokenize(args) -> int:
    started = time.perf_counter()
    path = train_tokenizer(args.dir, args.vocab, args.type, out_dir=args.out, force=args.force)
    print(f"{path} ({args.type}, {args.vocab:,} pieces; pad 0, bos 1, eos 2, unk 3; "
          f"{time.perf_counter() - started:.1f}s)")
    return 0


def cmd_stats(args) -> int:
    import sacrebleu

    manifest = load_manifest(args.dir)
    src, tgt = manifest["src"], manifest["tgt"]
    rows = []
    for split in SPLITS:
        pairs = read_split(args.dir, split, src, tgt)
        words = [sum(len(p[i].split()) for p in pairs) for i in (0, 1)]
        rows.append([split, f"{len(pairs):,}", f"{manifest['splits'][split]['documents']:,}", f"{words[0]:,}",
                     f"{words[1]:,}", f"{words[0] / max(1, len(pairs)):.1f}"])
    print(render(["split", "pairs", "documents", f"{src} words", f"{tgt} words", f"{src} words/pair"], rows), end="")
    test = read_split(args.dir, "test", src, tgt)
    hyp, ref = [s for s, _ in test], [[t for _, t in test]]
    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    scores = bleu.corpus_score(hyp, ref), chrf.corpus_score(hyp, ref)
    print(f"copy-the-source baseline on test: BLEU {scores[0].score:.1f}, chrF {scores[1].score:.1f} "
          f"({bleu.get_signature()} | {chrf.get_signature()})")
    if args.verify:
        problems = verify(args.dir)
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        print("sha256: all files match manifest.json" if not problems else "sha256: MISMATCH")
        return 2 if problems else 0
    return 0


def cmd_langid(args) -> int:
    from tfspec.data.langid import build_langid

    languages = tuple(x.strip() for x in args.languages.split(",") if x.strip())
    started = time.perf_counter()
    manifest = build_langid(args.dir, languages, args.per_language, force=args.force, progress=sys.stderr.isatty())
    rows = [[s, *(f"{manifest['labels'][s][x]:,}" for x in manifest["request"]["languages"])] for s in SPLITS]
    print(f"language identification corpus in {args.dir} ({time.perf_counter() - started:.1f}s); held out by page")
    print(render(["split", *manifest["request"]["languages"]], rows), end="")
    return 0


def cmd_code_switch(args) -> int:
    from tfspec.data.codeswitch import build_code_switch

    started = time.perf_counter()
    manifest = build_code_switch(args.langid, args.dir, {"train": args.train, "dev": args.dev, "test": args.test},
                                 args.seed)
    labels = sorted({tag for counts in manifest["labels"].values() for tag in counts})
    rows = [[s, f"{manifest['splits'][s]['pairs']:,}", *(f"{manifest['labels'][s].get(x, 0):,}" for x in labels)]
            for s in SPLITS]
    print(f"code-switched lines in {args.dir} ({time.perf_counter() - started:.1f}s), labelled word by word; each "
          f"split drawn from the same split of {args.langid}")
    print(render(["split", "lines", *(f"{x} words" for x in labels)], rows), end="")
    return 0


def register(command) -> None:
    c = command("data", lambda args: c.print_help() or 2,
                "Parallel text for `tfspec train`.\n" + LAYOUT)
    c.formatter_class, c.epilog = argparse.RawDescriptionHelpFormatter, EXAMPLES
    sub = c.add_subparsers(dest="data_command", metavar="ACTION")

    def action(name, fn, help_text, description):
        a = sub.add_parser(name, help=help_text, description=description)
        a.set_defaults(fn=fn)
        return a

    a = action("fetch", cmd_fetch, "download Debian's translated documentation and build a corpus",
               "Download documentation packages with `apt-get download` (no install) into DIR/.cache, unpack "
               "them with `dpkg -x`, align English with the other language (LibreOffice by paragraph id, the "
               "others by document structure), clean, split and write the corpus. Cached: a second run with "
               "the same options returns at once. Sources: " + ", ".join(
                   f"{n} ({s.licence})" for n, s in SOURCES.items()) + ".\n" + LAYOUT)
    a.add_argument("dir", metavar="DIR", help="corpus directory to write (created if needed)")
    a.add_argument("--pair", default="en-de", help="languages SRC-TGT, one of them en (default en-de)")
    a.add_argument("--sources", metavar="A,B", help=f"comma-separated subset of {','.join(SOURCES)} (default: all)")
    _common(a)
    a = action("prepare", cmd_prepare, "build a corpus from your own text or TSV files",
               "Clean, split and write your own parallel text: --src and --tgt (one segment per line, aligned) "
               "or --tsv (source TAB target [TAB document]). Without document names, blocks of consecutive "
               "lines are held out instead. The pair defaults to the files' suffixes (a.en, a.de). " + LAYOUT)
    a.add_argument("dir", metavar="DIR")
    a.add_argument("--src", metavar="FILE", help="source-language file, one segment per line")
    a.add_argument("--tgt", metavar="FILE", help="target-language file, aligned with --src")
    a.add_argument("--tsv", metavar="FILE", help="tab-separated source, target and optionally document")
    a.add_argument("--pair", help="languages SRC-TGT (default: from the file suffixes, else en-de)")
    _common(a)
    a = action("tokenize", cmd_tokenize, "train a shared sentencepiece model on a corpus's train split",
               "Train one sentencepiece model on train.SRC + train.TGT (shared vocabulary, as in the paper), "
               "written as DIR/spm-TYPE-VOCAB.model and .vocab with tfspec's special ids pad 0, bos 1, eos 2, "
               "unk 3. Deterministic; re-used when already there and newer than the corpus.")
    a.add_argument("dir", metavar="DIR")
    a.add_argument("--vocab", type=integer(8, MAX_VOCAB), required=True, help="vocabulary size, as in the spec's vocab.size")
    a.add_argument("--type", choices=["bpe", "unigram"], default="bpe", help="sentencepiece model (default bpe)")
    a.add_argument("--out", metavar="OUT", help="write the model here instead of DIR")
    a.add_argument("--force", action="store_true", help="train again even if the model exists")
    a = action("stats", cmd_stats, "counts, words and the copy-the-source BLEU baseline of a corpus",
               "Pairs, documents and words per split, and the BLEU and chrF (sacrebleu) of copying the test "
               "sources unchanged: the floor a trained model must clearly beat.")
    a.add_argument("dir", metavar="DIR")
    a.add_argument("--verify", action="store_true", help="also check every file's sha256 against the manifest")
    a = action("langid", cmd_langid, "build a language-identification corpus from LibreOffice help",
               "Download LibreOffice's help in each language (apt-get download, no install; ~8 MB each, cached "
               "in DIR/.cache) and write labelled paragraphs: {train,dev,test}.txt, .labels (the language) and "
               ".docs (the page). Pages go to test or dev by the sha256 of their path, the same pages in every "
               "language, so no test text is seen in training in any language. Paragraphs of 4-60 words; "
               "untranslated ones (equal to the English of the same paragraph id) and texts under two labels "
               "are dropped. For `tfspec finetune`; `tfspec train --src txt --tgt txt` pretrains on it.")
    a.add_argument("dir", metavar="DIR")
    a.add_argument("--languages", default="de,en,es,fr,it,nl,pt,sv",
                   help="comma-separated LibreOffice help languages (default de,en,es,fr,it,nl,pt,sv)")
    a.add_argument("--per-language", type=integer(1, 10**7), default=4000,
                   help="train texts per language at most (dev and test: a quarter each; default 4000)")
    a.add_argument("--force", action="store_true", help="download and rebuild even if cached")
    a = action("code-switch", cmd_code_switch, "compose mixed-language lines labelled word by word from a langid corpus",
               "Compose code-switched lines for word-level language identification (a token task for `tfspec "
               "finetune`): each line joins 2-3 fragments of 3-6 consecutive words cut from sentences of "
               "different languages of LANGID_DIR (`tfspec data langid`), each word labelled with its language "
               "(`other` for a word without a letter). Train lines draw only on LANGID_DIR's train split, dev on "
               "dev and test on test, so its held-out pages stay held out. Deterministic given --seed. Writes "
               "{train,dev,test}.txt (words), .labels (one label per word), .docs (the fragments' pages), "
               "README.md and manifest.json (task: tokens).")
    a.add_argument("langid", metavar="LANGID_DIR", help="a `tfspec data langid` directory")
    a.add_argument("dir", metavar="OUT_DIR", help="directory to write (created if needed)")
    a.add_argument("--train", type=integer(1, 10**7), default=16000, help="training lines (default 16000)")
    a.add_argument("--dev", type=integer(1, 10**7), default=2000, help="dev lines (default 2000)")
    a.add_argument("--test", type=integer(1, 10**7), default=2000, help="test lines (default 2000)")
    a.add_argument("--seed", type=SEED, default=0)
    a = action("sample", cmd_sample, "take a small corpus out of a prepared one (how the shipped sample is made)",
               "Copy short pairs of one source, chosen by the sha256 of their text, from each split of CORPUS "
               "into the same split of DIR.")
    a.add_argument("corpus", metavar="CORPUS")
    a.add_argument("dir", metavar="DIR")
    a.add_argument("--source", default="libreoffice", help="take pairs of this source only (default libreoffice)")
    a.add_argument("--sizes", default="2000,200,200", help="pairs in train,dev,test (default 2000,200,200)")
    a.add_argument("--max-words", type=POSITIVE, default=30, help="longest side in words (default 30)")
    ctc.register_data(action)
    images.register_data(action)


def _common(a) -> None:
    a.add_argument("--held-out", type=POSITIVE, metavar="N",
                   help="pairs in dev and in test each (default 2500, or a twentieth of a small corpus)")
    a.add_argument("--force", action="store_true", help="rebuild (fetch: download again) even if cached")
