"""The target-vocabulary shortlist (``tfspec.shortlist``, ``export --shortlist``, ``translate --shortlist``):
its counts against collections.Counter, its decoding against the full vocabulary's in onnxruntime,
and its refusals."""

from __future__ import annotations

import shutil
from collections import Counter

import numpy as np
import pytest
import torch

import tfspec.shortlist as shortlist_module
from tfspec import load_spec
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import build_module
from tfspec.data import sample_dir, train_tokenizer
from tfspec.errors import TfspecError
from tfspec.search import SearchOptions, search
from tfspec.shortlist import FILE, build

SPECIALS = [1, 2, 3]  # bos, eos, unk of tfspec's vocabularies


def zipf_pairs(rng, n: int, vocab: int) -> list[tuple[list[int], list[int]]]:
    """Sentence pairs whose tokens follow a Zipf law (ties and repeats, as in text)."""
    draw = lambda k: (np.minimum(rng.zipf(1.3, k), vocab - 5) + 3).tolist()  # noqa: E731
    return [(draw(rng.integers(1, 9)), draw(rng.integers(1, 9))) for _ in range(n)]


def counted(pairs, vocab: int, per_source: int, frequent: int) -> tuple[list[int], dict[int, list[int]]]:
    """The shortlist's rule spelled with Counter: the ``frequent`` most frequent targets (ties to
    the smaller id) and the specials; per source token, the targets sharing the most pairs with it."""
    freq = Counter(t for _, tgt in pairs for t in tgt)
    always = sorted(set(sorted(range(vocab), key=lambda t: (-freq[t], t))[:frequent]) | set(SPECIALS))
    together = Counter((s, t) for src, tgt in pairs for s in set(src) for t in set(tgt))
    best = {}
    for s in range(vocab):
        ranked = sorted((t for (a, t) in together if a == s and t not in always), key=lambda t: (-together[s, t], t))
        best[s] = ranked[:per_source]
    return always, best


@pytest.mark.parametrize("chunk", [1 << 22, 40])  # one reduction, and many (the running merge)
def test_build_equals_counter(monkeypatch, chunk):
    monkeypatch.setattr(shortlist_module, "CHUNK", chunk)
    pairs = zipf_pairs(np.random.default_rng(0), 300, 60)
    result = build(pairs, 60, 60, SPECIALS, per_source=4, frequent=6)
    always, best = counted(pairs, 60, 4, 6)
    assert result.always.tolist() == always
    got = {s: result.targets[result.offsets[s]:result.offsets[s + 1]].tolist() for s in range(60)}
    assert got == best
    src = np.array([[5, 9, 0], [7, 7, 0]])
    assert result.candidates(src).tolist() == sorted(set(always) | {t for s in (0, 5, 7, 9) for t in best[s]})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random tiny model, exported with a shortlist holding every token and with a real one."""
    spec = load_spec("tiny")
    torch.manual_seed(0)
    model = build_module(spec).eval()
    size = spec.vocab.size
    pairs = zipf_pairs(np.random.default_rng(1), 400, size)
    root = tmp_path_factory.mktemp("shortlist")
    export(model, root / "every", parity=False, shortlist=build(pairs, size, size, SPECIALS, frequent=size))
    export(model, root / "real", parity=False, shortlist=build(pairs, size, size, SPECIALS, per_source=5, frequent=20))
    return root, spec


@pytest.mark.parametrize("beam", [1, 4])
def test_every_token_decodes_as_full_vocabulary(tiny, beam):
    root, spec = tiny
    model = OnnxModel(root / "every", device="cpu")
    src = np.random.default_rng(2).integers(4, spec.vocab.size, (3, 9))
    options = SearchOptions(beam=beam, min_length=12, max_extra=12)
    assert len(model.decoder(shortlist=True).shortlist.candidates(src)) == spec.vocab.size
    assert search(model.decoder(shortlist=True), src, options) == search(model.decoder(), src, options)


def test_real_shortlist_restricts_and_keeps_logits(tiny):
    root, spec = tiny
    model = OnnxModel(root / "real", device="cpu")
    full, short = model.decoder(), model.decoder(shortlist=True)
    src = np.random.default_rng(3).integers(4, spec.vocab.size, (2, 6))
    allowed = set(short.shortlist.candidates(src).tolist())
    assert len(allowed) < spec.vocab.size / 2
    outputs = search(short, src, SearchOptions(beam=1, min_length=10, max_extra=10))
    assert {t for out in outputs for t in out} <= allowed
    ids = np.array(sorted(allowed))
    states, tokens = [full.start(src), short.start(src)], np.full((2, 1), spec.vocab.bos_id)
    for step in range(3):  # the shortlist graph's log-probs are the full graph's renormalised over the candidates
        (want, states[0]), (got, states[1]) = full.run(states[0], tokens, ["log_probs"]), short.run(
            states[1], tokens, ["log_probs"])
        logits = torch.from_numpy(want[:, ids]).double()
        np.testing.assert_allclose(got, torch.log_softmax(logits, -1).numpy(), atol=1e-5)
        tokens = ids[[[step], [step + 1]]]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The shipped sample corpus and a tokenizer of the tiny model's 1,000 pieces trained on it."""
    root = tmp_path_factory.mktemp("corpus")
    shutil.copytree(sample_dir(), root / "sample")
    return root / "sample", train_tokenizer(root / "sample", 1000)


def test_cli_export_and_translate_text(cli, corpus, tmp_path):
    data, tokenizer = corpus
    code, out, err = cli("export", "tiny", "--tokenizer", tokenizer, "--shortlist", data, "--shortlist-per-source",
                         "10", "-o", tmp_path / "m")
    assert code == 0, err
    assert "ok   shortlist step graph vs step graph" in out
    lines = tmp_path / "in.txt"
    lines.write_text("Select the cell.\nClick OK to close the dialog.\n")
    code, out, err = cli("translate", tmp_path / "m", lines, "--shortlist", "--beam", "2", "--max-extra", "5")
    assert code == 0, err
    assert len(out.splitlines()) == 2


def test_old_export_refuses_shortlist(cli, tmp_path):
    assert cli("export", "tiny", "--no-check", "-o", tmp_path / "m")[0] == 0
    (tmp_path / "in.txt").write_text("5 6 7\n")
    code, out, err = cli("translate", tmp_path / "m", tmp_path / "in.txt", "--shortlist")
    assert code == 2 and out == ""
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: {tmp_path / 'm'}: exported without a shortlist; re-export with `tfspec export ... --shortlist "
        "CORPUS_DIR` (or translate without --shortlist)"]
    assert "Traceback" not in err


@pytest.mark.parametrize("damage", [b"not a safetensors file", b""])
def test_corrupt_shortlist_file(cli, tiny, tmp_path, damage):
    root, _ = tiny
    shutil.copytree(root / "real", tmp_path / "m")
    (tmp_path / "m" / FILE).write_bytes(damage)
    (tmp_path / "in.txt").write_text("5 6 7\n")
    code, out, err = cli("translate", tmp_path / "m", tmp_path / "in.txt", "--shortlist")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "corrupt shortlist" in errors[0] and "Traceback" not in err


def test_shortlist_of_other_vocabulary_refused(cli, tiny, tmp_path):
    root, spec = tiny
    shutil.copytree(root / "real", tmp_path / "m")
    pairs = zipf_pairs(np.random.default_rng(4), 50, 40)
    shortlist_module.save(build(pairs, 40, 40, SPECIALS), tmp_path / "m" / FILE)
    (tmp_path / "in.txt").write_text("5 6 7\n")
    code, _, err = cli("translate", tmp_path / "m", tmp_path / "in.txt", "--shortlist")
    assert code == 2 and f"over {spec.vocab.size + 1} entries, one per source token" in err


def test_decoder_only_export_refuses_shortlist(cli, corpus, write_spec, tmp_path):
    data, tokenizer = corpus
    spec = write_spec("family: decoder-only\nvocab: 1000\nd_model: 32\nheads: 4\nd_ff: 64\npositional: {kind: learned, "
                      "max_len: 64}\ndecoder: {layers: 1, block: [causal_self_attention, ffn]}\n")
    code, out, err = cli("export", spec, "--tokenizer", tokenizer, "--shortlist", data, "-o", tmp_path / "m")
    assert code == 2 and not (tmp_path / "m").exists()
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        "error: --shortlist: spec does not translate sources (family decoder-only); a shortlist maps source tokens "
        "to target candidates"]


def test_ids_outside_the_vocabulary_refused():
    with pytest.raises(TfspecError, match=r"pair 2: token ids outside the vocabularies \(10 source, 10 target\)"):
        build([([4, 5], [6]), ([4], [12])], 10, 10, SPECIALS)


def test_generate_engine_refuses_shortlist(cli, tiny, tmp_path):
    root, _ = tiny
    (tmp_path / "in.txt").write_text("5 6 7\n")
    code, _, err = cli("translate", root / "real", tmp_path / "in.txt", "--shortlist", "--engine", "generate")
    assert code == 2 and err.strip().splitlines()[-1] == (
        "error: --shortlist decodes with --engine search: generate.onnx scores the whole vocabulary")
