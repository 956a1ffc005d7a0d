"""tfspec.data: corpus layout, cleaning rules, document-held-out splits, caching, tokenizers and
errors; all on the shipped sample and small generated files (no network).

The real fetch from Debian's archive (~70 s, ~150 MB) runs only when asked:
``TFSPEC_FETCH=1 python -m pytest tests/test_data.py -k fetch``.
"""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from tfspec.data import (SPLITS, fetch_corpus, load_manifest, load_tokenizer, make_sample, prepare_corpus, read_split,
                         sample_dir, train_tokenizer, verify)
from tfspec.data.clean import clean, normalize
from tfspec.data.corpus import split_by_document
from tfspec.data.markup import blocks
from tfspec.errors import TfspecError


def parallel(tmp_path, n=600, name="a"):
    """Two aligned files of n distinct, cleanly translatable lines."""
    src, tgt = tmp_path / f"{name}.en", tmp_path / f"{name}.de"
    src.write_text("".join(f"Open window number {i} now.\n" for i in range(n)), encoding="utf-8")
    tgt.write_text("".join(f"Öffnen Sie jetzt Fenster Nummer {i}.\n" for i in range(n)), encoding="utf-8")
    return src, tgt


def lines(data_dir, name):
    return (data_dir / name).read_text(encoding="utf-8").splitlines()


# -- the shipped sample ---------------------------------------------------------------------------

def test_sample_is_a_complete_intact_corpus():
    manifest = load_manifest(sample_dir())
    assert manifest["pair"] == "en-de" and manifest["sources"]["libreoffice"]["licence"] == "MPL-2.0"
    assert [len(read_split(sample_dir(), s)) for s in SPLITS] == [2000, 200, 200]
    assert verify(sample_dir()) == []
    assert "MPL-2.0" in (sample_dir() / "README.md").read_text(encoding="utf-8")


def test_sample_splits_share_no_document_and_no_source_sentence():
    docs = {s: set(lines(sample_dir(), f"{s}.docs")) for s in SPLITS}
    sources = {s: {src for src, _ in read_split(sample_dir(), s)} for s in SPLITS}
    for a, b in [("train", "dev"), ("train", "test"), ("dev", "test")]:
        assert not docs[a] & docs[b] and not sources[a] & sources[b]


# -- cleaning rules -------------------------------------------------------------------------------

@pytest.mark.parametrize("src, tgt, rule", [
    ("", "Hallo", "empty"),
    ("Open file", "Open file", "identical"),
    ("%1 - %2", "%2 – %1", "format-only"),
    ("$[officename] {0}", "Öffnet {0}", "format-only"),
    (" ".join(["word"] * 101), " ".join(["Wort"] * 101), "length"),
    ("one two", "eins zwei drei vier fünf sechs sieben acht neun", "ratio"),  # 9 > 3 * 2 + 2
    ("Pop Art", "Pop-art", "untranslated"),  # the same words
    ("Save the file to the disk now", "Save the file to the disk now, please", "untranslated"),
])
def test_each_cleaning_rule_drops_its_case(src, tgt, rule):
    result = clean([(src, tgt, "doc")])
    assert result.kept == [] and dict(result.dropped) == {rule: 1}


def test_cleaning_keeps_translations_normalizes_and_dedupes():
    pairs = [("Opens  the\u00a0file.\u200b", "Öffnet die\tDatei.", "a"), ("Opens the file.", "Öffnet die Datei.", "b"),
             ("one two", "eins zwei drei vier fünf sechs sieben acht", "c")]  # 8 = 3 * 2 + 2: kept
    result = clean(pairs)
    assert result.kept == [("Opens the file.", "Öffnet die Datei.", "a"), pairs[2]]
    assert dict(result.dropped) == {"duplicate": 1}
    assert normalize(" a\u00a0 b\u00ad\n c ") == "a b c"


def test_untranslated_rule_is_off_for_an_english_target():
    assert clean([("Öffnen Sie die Datei", "Open the file and save it", "d")], untranslated=False).kept


def test_markup_is_stripped_and_platform_variants_skipped():
    page = ('<p id="par_id1">Choose <span class="switchinline"><span hidden="true" class="MAC">Preferences'
            '</span><span hidden="true" id="default1">Tools - Options</span></span> &amp; <b>OK</b>.</p>'
            '<pre>code()</pre><div class="para">Second <code>ls</code> line</div>')
    assert [(b.id, b.text) for b in blocks(page)] == [("par_id1", "Choose Tools - Options & OK."),
                                                      ("", "Second ls line")]


# -- preparing user files and splitting -----------------------------------------------------------

def test_prepare_text_files_splits_by_line_blocks_deterministically(tmp_path):
    src, tgt = parallel(tmp_path)
    first = prepare_corpus(tmp_path / "one", src_file=src, tgt_file=tgt)
    prepare_corpus(tmp_path / "two", src_file=src, tgt_file=tgt)
    assert first["pair"] == "en-de" and first["split"].startswith("line blocks of 6")
    assert sum(first["splits"][s]["pairs"] for s in SPLITS) == 600 and first["splits"]["test"]["pairs"] >= 30
    for name in first["files"]:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    sources = {s: set(lines(tmp_path / "one", f"{s}.en")) for s in SPLITS}
    assert not sources["train"] & sources["test"] and not sources["dev"] & sources["test"]
    assert "line blocks" in (tmp_path / "one" / "README.md").read_text(encoding="utf-8")


def test_prepare_tsv_keeps_each_document_in_one_split(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"Close panel {i} here.\tSchließen Sie hier Bereich {i}.\tdoc{i % 9}\n" for i in range(270)),
                   encoding="utf-8")
    manifest = prepare_corpus(tmp_path / "c", tsv=tsv, pair="en-de")
    assert manifest["split"].startswith("document")
    docs = {s: set(lines(tmp_path / "c", f"{s}.docs")) for s in SPLITS}
    assert all(docs.values()) and not (docs["train"] & docs["test"]) and not (docs["dev"] & docs["test"])
    assert sum(len(d) for d in docs.values()) == 9


def test_split_leaves_no_held_out_source_in_train():
    pairs = [(f"s{i % 37}", f"t{i}", f"doc{i % 10}") for i in range(200)]  # sources recur across documents
    splits, removed = split_by_document(pairs, 20)
    held = {p[0] for s in ("dev", "test") for p in splits[s]}
    assert removed > 0 and not held & {p[0] for p in splits["train"]}


def test_cache_hit_does_not_rewrite_and_force_or_changes_rebuild(tmp_path):
    src, tgt = parallel(tmp_path)
    out = tmp_path / "c"
    prepare_corpus(out, src_file=src, tgt_file=tgt)
    stamp = (out / "train.en").stat().st_mtime_ns
    prepare_corpus(out, src_file=src, tgt_file=tgt)
    assert (out / "train.en").stat().st_mtime_ns == stamp
    prepare_corpus(out, src_file=src, tgt_file=tgt, force=True)
    assert (out / "train.en").stat().st_mtime_ns > stamp
    with open(out / "dev.de", "a", encoding="utf-8") as f:  # an edited corpus file is not a cache hit
        f.write("extra\n")
    prepare_corpus(out, src_file=src, tgt_file=tgt)
    assert verify(out) == []


def test_sample_command_takes_short_pairs_from_each_split(tmp_path):
    manifest = make_sample(sample_dir(), tmp_path / "s", sizes=(50, 10, 10), max_words=8)
    assert [manifest["splits"][s]["pairs"] for s in SPLITS] == [50, 10, 10]
    test_sources = {s for s, _ in read_split(sample_dir(), "test")}
    assert {s for s, _ in read_split(tmp_path / "s", "test")} <= test_sources


# -- tokenizer ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_tokenizer_ids_round_trip_determinism_and_cache(tmp_path, kind):
    path = train_tokenizer(sample_dir(), 1000, kind, out_dir=tmp_path)  # the shipped sample stays untouched
    assert path == tmp_path / f"spm-{kind}-1000.model" and not list(sample_dir().glob("spm-*"))
    sp = load_tokenizer(path)
    assert (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.unk_id(), sp.get_piece_size()) == (0, 1, 2, 3, 1000)
    for src, tgt in read_split(sample_dir(), "train")[:50]:
        for text in (src, tgt):
            assert sp.decode(sp.encode(text)) == text
    data, stamp = path.read_bytes(), path.stat().st_mtime_ns
    assert train_tokenizer(sample_dir(), 1000, kind, out_dir=tmp_path).stat().st_mtime_ns == stamp  # cached
    assert train_tokenizer(sample_dir(), 1000, kind, out_dir=tmp_path, force=True).read_bytes() == data


def test_tokenizer_errors(tmp_path):
    with pytest.raises(TfspecError, match="could not train a 100000-piece"):
        train_tokenizer(sample_dir(), 100000, out_dir=tmp_path)
    with pytest.raises(TfspecError, match="no such tokenizer model"):
        load_tokenizer(tmp_path / "missing.model")
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(TfspecError, match="not a sentencepiece model"):
        load_tokenizer(tmp_path / "junk.model")
    import sentencepiece as spm  # sentencepiece's own defaults: unk 0, bos 1, eos 2, no pad

    text = [line for pair in read_split(sample_dir(), "dev") for line in pair]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_prefix=str(tmp_path / "other"),
                                   vocab_size=300, logstream=open(os.devnull, "w"))
    with pytest.raises(TfspecError, match="special ids"):
        load_tokenizer(tmp_path / "other.model")


# -- errors ---------------------------------------------------------------------------------------

def test_read_split_errors(tmp_path):
    shutil.copytree(sample_dir(), tmp_path / "c")
    c = tmp_path / "c"
    (c / "dev.de").unlink()
    with pytest.raises(TfspecError, match=r"dev\.de: no such file"):
        read_split(c, "dev")
    (c / "test.de").write_text("eins\nzwei\n", encoding="utf-8")
    with pytest.raises(TfspecError, match="test.en has 200 lines but test.de has 2"):
        read_split(c, "test")
    (c / "train.de").write_bytes("Grüße\n".encode("latin-1"))
    with pytest.raises(TfspecError, match=r"train\.de:1: not UTF-8"):
        read_split(c, "train")
    with pytest.raises(TfspecError, match="unknown split"):
        read_split(c, "valid")
    with pytest.raises(TfspecError, match="not a prepared corpus"):
        load_manifest(tmp_path)


def test_prepare_errors_are_one_line_each_on_the_cli(tmp_path, cli):
    src, tgt = parallel(tmp_path)
    tgt.write_text("nur eine Zeile\n", encoding="utf-8")
    code, out, err = cli("data", "prepare", "--src", src, "--tgt", tgt, tmp_path / "c")
    assert code == 2 and err.startswith("error: ") and "has 600 lines but" in err and "Traceback" not in err
    code, _, err = cli("data", "prepare", "--src", tmp_path / "none.en", "--tgt", tgt, tmp_path / "c")
    assert code == 2 and "none.en" in err
    (tmp_path / "bad.tsv").write_text("a\tb\nc\n", encoding="utf-8")
    code, _, err = cli("data", "prepare", "--tsv", tmp_path / "bad.tsv", tmp_path / "c")
    assert code == 2 and "bad.tsv:2: 1 tab-separated column" in err
    code, _, err = cli("data", "prepare", tmp_path / "c")
    assert code == 2 and "either --src FILE and --tgt FILE, or --tsv FILE" in err


def test_cli_stats_prints_counts_and_the_copy_baseline(cli):
    """Each split's row counts what its files hold (counted here); the baseline is sacrebleu's
    BLEU and chrF of the test sources taken as their own translations."""
    import sacrebleu

    code, out, _ = cli("data", "stats", sample_dir(), "--verify")
    assert code == 0 and "nrefs:1" in out and "all files match" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    for split in SPLITS:
        en, de = (lines(sample_dir(), f"{split}.{side}") for side in ("en", "de"))
        documents = len(set(lines(sample_dir(), f"{split}.docs")))
        words = [sum(len(line.split()) for line in side) for side in (en, de)]
        assert rows[split] == [f"{len(en):,}", f"{documents:,}", f"{words[0]:,}", f"{words[1]:,}",
                               f"{words[0] / len(en):.1f}"], split
    sources, targets = lines(sample_dir(), "test.en"), [lines(sample_dir(), "test.de")]
    bleu, chrf = sacrebleu.corpus_bleu(sources, targets).score, sacrebleu.corpus_chrf(sources, targets).score
    assert f"copy-the-source baseline on test: BLEU {bleu:.1f}, chrF {chrf:.1f} (" in out


@pytest.mark.parametrize("change", [{"src": None}, {"tgt": 5}, {"src": "../en"}, {"files": []}, {"splits": 3}],
                         ids=["no src", "tgt number", "src a path", "files list", "splits number"])
def test_forged_corpus_manifest_is_one_error_line(cli, tmp_path, change):
    """A corpus manifest is data: a missing src or a number for tgt was a traceback in `train`."""
    import json
    import shutil

    data = tmp_path / "corpus"
    shutil.copytree(sample_dir(), data)
    manifest = json.loads((data / "manifest.json").read_text())
    manifest = {k: v for k, v in (manifest | change).items() if v is not None}
    (data / "manifest.json").write_text(json.dumps(manifest))
    for command in (["data", "stats", data], ["train", "tiny", "--data", data, "--out", tmp_path / "run", "--steps", 1]):
        code, _, err = cli(*command)
        assert code == 2 and "corrupt manifest" in err and err.count("\n") == 1, err


def fake_apt(tmp_path, monkeypatch, stderr):
    """An apt-get on PATH that fails every download the way a real one would."""
    script = tmp_path / "bin" / "apt-get"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\n[ "$1" = update ] && exit 0\necho "{stderr}" >&2\nexit 100\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(script.parent))


@pytest.mark.parametrize("stderr, message", [
    ("E: Failed to fetch http://deb/x.deb  Temporary failure resolving 'deb'", "is the network reachable"),
    ("E: Unable to locate package gimp-help-xx", "not in apt's sources"),
    ("E: Write error - write (28: No space left on device)", "disk full"),
])
def test_fetch_failures_are_explained(tmp_path, monkeypatch, stderr, message):
    fake_apt(tmp_path, monkeypatch, stderr)
    with pytest.raises(TfspecError, match=message):
        fetch_corpus(tmp_path / "c", "en-de", ["gimp"])


def test_fetch_without_apt_or_with_bad_options(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = cli("data", "fetch", tmp_path / "c")
    assert code == 2 and "apt-get not found" in err and "Traceback" not in err
    with pytest.raises(TfspecError, match="unknown source"):
        fetch_corpus(tmp_path / "c", "en-de", ["wikipedia"])
    with pytest.raises(TfspecError, match="one side must be en"):
        fetch_corpus(tmp_path / "c", "de-fr")


@pytest.mark.skipif(not os.environ.get("TFSPEC_FETCH"), reason="downloads ~150 MB: set TFSPEC_FETCH=1 to run")
def test_fetch_real_corpus(tmp_path_factory):
    if not shutil.which("apt-get"):
        pytest.skip("no apt-get on this machine")
    out = tmp_path_factory.mktemp("fetch") / "en-de"
    manifest = fetch_corpus(out, "en-de")
    total = sum(manifest["splits"][s]["pairs"] for s in SPLITS)
    assert total > 45_000 and all(manifest["splits"][s]["pairs"] >= 2000 for s in ("dev", "test"))
    assert all(sum(info["pairs"].values()) for info in manifest["sources"].values())
    assert verify(out) == [] and fetch_corpus(out, "en-de") == manifest  # cached
