"""`tfspec export` and `tfspec translate` end to end, and what they do with bad input."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
import torch

from tfspec import load_spec
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.backends.torch.checkpoint import load_weights, save_weights
from tfspec.search import SearchOptions, search

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """tiny, exported once from saved weights through the CLI."""
    from tfspec.cli import main

    root = tmp_path_factory.mktemp("deploy")
    torch.manual_seed(3)
    save_weights(build_module(load_spec("tiny")), root / "tiny.safetensors")
    assert main(["export", "tiny", "--weights", str(root / "tiny.safetensors"), "-o", str(root / "out")]) == 0
    return root


def full_sequence_diff(directory, model) -> float:
    """Largest |logits| difference of the exported full-sequence graph, in a plain onnxruntime
    session, from ``model`` (PyTorch) on random unpadded tokens."""
    rng = np.random.default_rng(7)
    src, tgt = rng.integers(4, 1000, (2, 6)), rng.integers(4, 1000, (2, 5))
    session = ort.InferenceSession(str(directory / "model.onnx"), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        ref = model.eval()(torch.from_numpy(src), torch.from_numpy(tgt)).numpy()
    masks = {"attention_mask": np.ones_like(src), "decoder_attention_mask": np.ones_like(tgt)}
    return float(np.abs(session.run(["logits"], {"src": src, "tgt": tgt} | masks)[0] - ref).max())


def test_export_reports_checker_and_parity(cli, tmp_path):
    code, out, err = cli("export", "tiny", "-o", tmp_path / "m", "--opset", "23")
    assert code == 0, err
    assert "onnx.checker: ok" in out and "parity: ok" in out and "FAIL" not in out
    assert "randomly initialised" in err
    manifest = json.loads((tmp_path / "m" / "tfspec.json").read_text())
    assert manifest["opset"] == 23 and all(c["ok"] for c in manifest["parity"])
    torch.manual_seed(0)  # the random weights of --seed 0
    assert full_sequence_diff(tmp_path / "m", build_module(load_spec("tiny"))) < 1e-4


def test_parity_fails_for_graphs_that_differ(cli, tmp_path, monkeypatch):
    """Graphs emitted from weights 0.1% off those checked: logits ~1e-2 away, past float32's
    tolerance (1e-4) though within float16's (5e-2): export says FAILED and exits 1."""
    module = importlib.import_module("tfspec.backends.onnx.exporter")
    emit = module.emit
    monkeypatch.setattr(module, "emit", lambda graph, kind, weights, **kwargs: emit(
        graph, kind, {name: w * 1.001 for name, w in weights.items()}, **kwargs))
    code, out, err = cli("export", "tiny", "-o", tmp_path / "m")
    assert code == 1 and "parity: FAILED" in out and "FAIL full-sequence logits, batch 3" in out, out
    torch.manual_seed(0)
    assert 1e-3 < full_sequence_diff(tmp_path / "m", build_module(load_spec("tiny"))) < 5e-2
    records = json.loads((tmp_path / "m" / "tfspec.json").read_text())["parity"]
    logits = [r for r in records if "logits" in r["check"] or "step" in r["check"]]
    assert len(logits) == 9 and not any(r["ok"] for r in logits)
    assert all(r["tolerance"] == 1e-4 and 1e-3 < r["max_abs_diff"] < 5e-2 for r in logits)


def test_translate_ids_beam_and_greedy(cli, exported, tmp_path):
    """translate prints what tfspec.search decodes with the exported graphs, and the PyTorch
    backend with the same weights, at the beam asked for (beam 4 and greedy differ on line 3)."""
    from tfspec.backends.onnx import OnnxModel

    lines = tmp_path / "in.txt"
    lines.write_text("5 6 7 8\n\n9 10 11\n")
    sources = [[5, 6, 7, 8, 2], None, [9, 10, 11, 2]]  # ids and EOS; an empty line
    model = build_module(load_spec("tiny")).eval()
    load_weights(model, exported / "tiny.safetensors")
    decoders = [OnnxModel(exported / "out", device="cpu").decoder(), TorchDecoder(model)]
    printed = {}
    for beam in (1, 4):
        code, out, err = cli("translate", exported / "out", lines, "--beam", beam, "--max-extra", "6")
        assert code == 0, err
        rows = out.split("\n")[:3]
        assert rows[1] == ""  # an empty line stays empty
        # output length <= source length (with its EOS) + max_extra
        assert len(rows[0].split()) <= 5 + 6 and len(rows[2].split()) <= 4 + 6
        assert "on CPU" in err
        options = SearchOptions(beam=beam, alpha=0.6, max_extra=6)
        for decoder in decoders:
            assert rows == [" ".join(map(str, search(decoder, np.array([src]), options)[0])) if src else ""
                            for src in sources], (beam, decoder)
        printed[beam] = rows
    assert printed[1][2] != printed[4][2]  # so a translate deaf to --beam fails


def test_too_long_input_is_cut_with_a_warning(cli, exported, tmp_path):
    """The first 255 ids and EOS are translated, and the output stops at the last position."""
    from tfspec.backends.onnx import OnnxModel

    ids = list(range(5, 305))  # all different: keeping the wrong part would show
    (tmp_path / "long.txt").write_text(" ".join(map(str, ids)) + "\n")  # tiny has 256 positions
    code, out, err = cli("translate", exported / "out", tmp_path / "long.txt", "--beam", "1", "--max-extra", "2")
    assert code == 0 and "line 1: 301 tokens, more than the model's 256 positions" in err
    assert len(out.split("\n")[0].split()) <= 255
    decoder = OnnxModel(exported / "out", device="cpu").decoder()
    expected = search(decoder, np.array([ids[:255] + [2]]), SearchOptions(beam=1, max_extra=2, max_length=255))[0]
    assert out.split("\n")[0] == " ".join(map(str, expected))


@pytest.mark.parametrize("line, message", [("5 six 7", "expected token ids"),
                                           ("5 99999", "outside the vocabulary")])
def test_bad_input_lines(cli, exported, tmp_path, line, message):
    (tmp_path / "bad.txt").write_text(line + "\n")
    code, out, err = cli("translate", exported / "out", tmp_path / "bad.txt")
    assert code == 2 and message in err and "Traceback" not in err


def _copy(exported, tmp_path):
    import shutil

    return shutil.copytree(exported / "out", tmp_path / "copy")


def test_broken_model_directories(cli, exported, tmp_path):
    code, _, err = cli("translate", tmp_path / "missing")
    assert code == 2 and "no such model directory" in err
    copy = _copy(exported, tmp_path)
    (copy / "decoder.onnx").write_bytes(b"\x08\x01garbage")
    code, _, err = cli("translate", copy)
    assert code == 2 and "decoder.onnx: onnxruntime cannot load it" in err
    (copy / "decoder.onnx").unlink()
    code, _, err = cli("translate", copy)
    assert code == 2 and "decoder.onnx: missing" in err
    (copy / "tfspec.json").write_text("{not json")
    code, _, err = cli("translate", copy)
    assert code == 2 and "corrupt manifest" in err


@pytest.mark.parametrize("change", [{"graphs": {"model": 5}}, {"graphs": []}, {"graphs": {}},
                                    {"graphs": {"model": "/etc/hostname"}}, {"graphs": {"model": "../x/model.onnx"}},
                                    {"graphs": {"scripts": "model.onnx"}}, {"dtype": "object"}, {"dtype": [1]},
                                    {"spec": "tiny"}],
                         ids=["number", "list", "empty", "absolute", "outside", "unknown kind", "dtype", "dtype list",
                              "spec string"])
def test_forged_manifests_are_one_error_line(cli, exported, tmp_path, change):
    """A manifest is data: graph files only by plain name inside the directory, known kinds,
    float dtypes; anything else is named, not a traceback and not a file read elsewhere."""
    copy = _copy(exported, tmp_path)
    manifest = json.loads((copy / "tfspec.json").read_text())
    (copy / "tfspec.json").write_text(json.dumps(manifest | change))
    code, _, err = cli("translate", copy)
    assert code == 2 and err.startswith("error: ") and "corrupt manifest" in err and err.count("\n") == 1, err


def test_graphs_from_another_version_or_export_are_refused(cli, exported, tmp_path):
    copy = _copy(exported, tmp_path)
    manifest = json.loads((copy / "tfspec.json").read_text())
    (copy / "tfspec.json").write_text(json.dumps(manifest | {"format": 99, "tfspec_version": "9.0"}))
    code, _, err = cli("translate", copy)
    assert code == 2 and "format 99 by tfspec 9.0" in err and "re-export" in err
    (copy / "tfspec.json").write_text(json.dumps(manifest | {"export_id": "another"}))
    code, _, err = cli("translate", copy)
    assert code == 2 and "comes from another export" in err


def test_weights_that_do_not_match_the_spec(cli, exported, write_spec, tmp_path):
    spec = write_spec("""
        extends: tiny.yaml
        d_ff: 128
        decoder: {layers: 1}
    """.replace("tiny.yaml", str(_shipped("tiny.yaml"))))
    code, _, err = cli("export", spec, "--weights", exported / "tiny.safetensors", "-o", tmp_path / "x")
    assert code == 2
    assert "weights do not match spec" in err
    assert "encoder.layers.0.ffn.w_1: file has [256, 64], spec needs [128, 64]" in err
    assert "9 shapes differ, 0 missing, 20 unexpected" in err and "unexpected decoder.layers.1." in err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("name, content", [("w.safetensors", b"\x00" * 40), ("w.pt", b"PK\x03\x04 not a zip")])
def test_corrupt_weights_files(cli, tmp_path, name, content):
    (tmp_path / name).write_bytes(content)
    code, _, err = cli("export", "tiny", "--weights", tmp_path / name, "-o", tmp_path / "x")
    assert code == 2 and ("not a readable weights file" in err or "corrupt safetensors header" in err), err
    assert err.count("error:") == 1 and "Traceback" not in err


def test_pickled_code_in_weights_is_not_run(cli, tmp_path):
    import pickle

    class Boom:
        def __reduce__(self):
            return (print, ("code ran",))

    (tmp_path / "evil.pt").write_bytes(pickle.dumps({"encoder.embed.weight": Boom()}))
    code, out, err = cli("export", "tiny", "--weights", tmp_path / "evil.pt", "-o", tmp_path / "x")
    assert code == 2 and "code ran" not in out and "not a readable weights file" in err


def _shipped(name):
    from tests.conftest import SPECS

    return SPECS / name


def test_an_imported_directory_exports_its_own_weights(cli, tmp_path):
    """`tfspec export DIR` on what `tfspec import` wrote takes DIR/model.safetensors (it exported
    random weights unless --weights was given): the graphs compute transformers' logits."""
    from hf_checkpoints import padded_batch, save_checkpoint

    from tfspec.backends.onnx import OnnxModel

    original = save_checkpoint("gpt2", tmp_path / "hf")
    assert cli("import", tmp_path / "hf", "-o", tmp_path / "imported", "--quiet")[0] == 0
    code, out, err = cli("export", tmp_path / "imported", "-o", tmp_path / "onnx")
    assert code == 0, out + err
    assert "model.safetensors (the directory's own" in err and "randomly initialised" not in err
    tokens, keep = padded_batch("gpt2")
    with torch.no_grad():
        want = original(input_ids=tokens).logits.numpy()
    got = OnnxModel(tmp_path / "onnx").logits(tgt=tokens.numpy())
    assert abs(got - want)[keep.numpy()].max() < 1e-4


@pytest.mark.parametrize("beam", ["1", "4"])
def test_decoder_only_prompts_near_the_position_limit(cli, write_spec, tmp_path, beam):
    """A decoder-only export's prompt takes positions too: prompts of 20 to 70 ids (with EOS,
    after the start token) continue within the 64 positions, by as many tokens as the search
    given that room decodes, and a prompt that fills them continues with nothing (this was a
    traceback: the output ran past the position table)."""
    from tfspec.backends.onnx import OnnxModel

    spec = write_spec("""
        name: dec
        family: decoder-only
        vocab: 100
        d_model: 32
        heads: 4
        d_ff: 64
        norm: pre
        positional: {kind: learned, max_len: 64}
        output_bias: true
        decoder: {layers: 1, block: [causal_self_attention, ffn]}
        """)
    from tfspec import load_spec
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import save_weights

    model = build_module(load_spec(spec))
    with torch.no_grad():  # end of sequence made unlikely: outputs run until the room is used up
        for p in model.parameters():
            p.normal_(0, 0.5)
        model.get_parameter("output.bias")[2] = -100.0
    save_weights(model, tmp_path / "w.safetensors")
    assert cli("export", spec, "--weights", tmp_path / "w.safetensors", "-o", tmp_path / "out")[0] == 0
    rows = [list(range(5, 5 + n)) for n in (20, 58, 62, 70)]
    (tmp_path / "in.txt").write_text("\n".join(" ".join(map(str, r)) for r in rows) + "\n")
    code, out, err = cli("translate", tmp_path / "out", tmp_path / "in.txt", "--beam", beam, "--max-extra", "50")
    assert code == 0, err
    decoder = OnnxModel(tmp_path / "out", device="cpu").decoder()
    printed = out.split("\n")[:4]
    for row, line in zip(rows, printed):
        ids = row + [2] if len(row) + 1 <= 64 else row[:63] + [2]  # cut as translate warns
        room = 63 - len(ids)
        expected = [] if room < 1 else search(decoder, None, SearchOptions(beam=int(beam), max_extra=50,
                                                                          max_length=room), np.array([[1] + ids]))[0]
        assert line == " ".join(map(str, expected)) and len(expected) == max(min(room, 50), 0)
